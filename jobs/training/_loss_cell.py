"""The Cell that joins a network and its loss, so AMP can cast (or spare) both.

It sits in its own importable module because AMP's O1 rewrite and
``mindspore.jit`` read a Cell's source through ``sys.modules``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mindspore import nn

from ampsweep.contracts import LOSS_OUTSIDE

if TYPE_CHECKING:  # O1's rewrite imports this file as a top-level module: no relative import at run time
    from ._amp import Fp32Part


class NetworkWithLoss(nn.Cell):
    """``(*inputs, label) -> loss``; ``auto_prefix=False`` keeps the user's parameter names."""

    def __init__(self, network: Any, loss_fn: Any) -> None:
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss_fn = loss_fn

    def construct(self, *batch: Any) -> Any:
        return self.loss_fn(self.network(*batch[:-1]), batch[-1])


def cast_for_trial(network: Any, loss_fn: Any, config: Any) -> tuple[NetworkWithLoss, Fp32Part]:
    """``(*inputs, label) -> loss`` cast for the trial's AMP policy and ``loss_placement``, and its FP32 part.

    What ``outside`` and ``inside`` cast: docs/spec.md (Where the loss runs). The FP32 part is read on
    the uncast Cells; the graph built on the cell holds it for each of its trials. A listed Cell that
    cannot be kept in FP32 raises ``ampsweep.amp.NotKeptInFloat32`` from the cast.
    """
    from ._amp import apply_amp, fp32_part, known_layer_types, resolve_black_list

    black_list = resolve_black_list(config.black_list, known_layer_types([network, loss_fn]))
    part = fp32_part(network, loss_fn, config.amp_level, black_list, config.loss_placement)
    if config.loss_placement == LOSS_OUTSIDE:
        return NetworkWithLoss(apply_amp(network, config.amp_level, black_list, config.dtype), loss_fn), part
    return apply_amp(NetworkWithLoss(network, loss_fn), config.amp_level, black_list, config.dtype), part
