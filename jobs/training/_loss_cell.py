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


def cast_for_trial(network: Any, loss_fn: Any, config: Any) -> NetworkWithLoss:
    """``(*inputs, label) -> loss`` cast for the trial's AMP policy and ``loss_placement``.

    ``outside`` casts the network alone: AMP hands its output back in float32,
    so the loss runs in float32 on it — what ``Model(net, loss_fn, opt,
    amp_level=...)`` (``amp.build_train_network``) and a hand-written
    ``loss_fn(amp.auto_mixed_precision(net)(x), y)`` do. ``inside`` casts the
    network together with its loss, as when a ``WithLossCell`` is cast as a
    whole: the loss computes in low precision unless its class is black-listed.

    Before the cast, what the black list keeps in FP32 (:func:`fp32_part`, on
    the uncast Cells) is recorded under the trial's ``graph_id``, so each trial
    of the graph reports it (``TrialResult.fp32_part``). A listed Cell that
    cannot be kept in FP32 raises ``BlackListNotApplicable`` from the cast.
    """
    from ._amp import apply_amp, fp32_part, known_layer_types, record_fp32_part, resolve_black_list

    black_list = resolve_black_list(config.black_list, known_layer_types([network, loss_fn]))
    part = fp32_part(network, loss_fn, config.amp_level, black_list, config.loss_placement)
    record_fp32_part(config.graph_id, part)
    if config.loss_placement == "outside":
        return NetworkWithLoss(apply_amp(network, config.amp_level, black_list, config.dtype), loss_fn)
    return apply_amp(NetworkWithLoss(network, loss_fn), config.amp_level, black_list, config.dtype)
