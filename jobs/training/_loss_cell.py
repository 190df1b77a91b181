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

    ``outside`` casts the network alone: AMP hands its output back in float32,
    so the loss runs in float32 on it — what ``Model(net, loss_fn, opt,
    amp_level=...)`` (``amp.build_train_network``) and a hand-written
    ``loss_fn(amp.auto_mixed_precision(net)(x), y)`` do. ``inside`` casts the
    network together with its loss, as when a ``WithLossCell`` is cast as a
    whole: the loss computes in low precision unless its class is black-listed.

    The FP32 part (:func:`fp32_part`: what the black list keeps in FP32, read
    on the uncast Cells) goes back with the cell: the graph built on it holds
    it, and each trial of the graph reports it (``TrialResult.fp32_part``). A
    listed Cell that cannot be kept in FP32 raises
    ``ampsweep.amp.NotKeptInFloat32`` from the cast.
    """
    from ._amp import apply_amp, fp32_part, known_layer_types, resolve_black_list

    black_list = resolve_black_list(config.black_list, known_layer_types([network, loss_fn]))
    part = fp32_part(network, loss_fn, config.amp_level, black_list, config.loss_placement)
    if config.loss_placement == LOSS_OUTSIDE:
        return NetworkWithLoss(apply_amp(network, config.amp_level, black_list, config.dtype), loss_fn), part
    return apply_amp(NetworkWithLoss(network, loss_fn), config.amp_level, black_list, config.dtype), part
