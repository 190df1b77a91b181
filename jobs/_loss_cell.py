"""The Cell that joins a network and its loss, so AMP can cast (or spare) both.

It sits in its own importable module because AMP's O1 rewrite and
``mindspore.jit`` read a Cell's source through ``sys.modules``.
"""

from __future__ import annotations

from typing import Any

from mindspore import nn


class NetworkWithLoss(nn.Cell):
    """``(*inputs, label) -> loss``; ``auto_prefix=False`` keeps the user's parameter names."""

    def __init__(self, network: Any, loss_fn: Any) -> None:
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss_fn = loss_fn

    def construct(self, *batch: Any) -> Any:
        return self.loss_fn(self.network(*batch[:-1]), batch[-1])
