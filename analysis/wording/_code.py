"""Turn a ranked configuration into the MindSpore code a user pastes.

The report's point is "what to change in the training script", so the
recommendation is rendered as code for the two ways people train with
MindSpore: a hand-written ``train_step`` (functional ``value_and_grad``) and
``mindspore.train.Model``. Only MindSpore 2.10 APIs are used
(``amp.auto_mixed_precision``, ``amp.custom_mixed_precision``,
``amp.StaticLossScaler``/``DynamicLossScaler``, ``amp.all_finite``,
``nn.TrainOneStepCell``); nothing here imports MindSpore, the text is
generated from the Parquet values alone.

Both snippets do what the sweep's trainer did, so the numbers in the report
hold for them:

* the cast matches the trials' ``loss_placement``: ``outside`` casts the
  network alone, so the loss runs in float32 on its (float32) output, as
  ``Model(net, loss_fn, opt)`` and a loop computing ``loss_fn(net(x), y)`` do;
  ``inside`` casts the network *together with its loss* (``nn.WithLossCell``),
  so the loss computes in low precision unless its class is black-listed;
* clipping is by global norm of the unscaled gradients, computed in float32;
* with loss scaling, a step whose gradients are not finite is skipped, and a
  dynamic scaler changes its scale every ``DYNAMIC_SCALE_WINDOW`` finite steps.

For ``Model`` the network is cast *before* it is handed over and Model gets
``amp_level="O0"``: ``Model(..., amp_level="O2")`` cannot take a custom black
list, casts the loss differently and turns on its own dynamic loss scaling
(which MindSpore refuses on CPU). Clipping or loss scaling needs a
``TrainOneStepCell`` subclass, which Model then runs as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from ampsweep.contracts import DYNAMIC_SCALE_WINDOW, FP32_LEVEL

from .._model import Recommendation

_DYNAMIC_DEFAULT = "2**16"
_EPS = "1e-6"

_HEADER = [
    "import mindspore as ms",
    "from mindspore import amp, nn, ops",
    "import mindspore.common.dtype as mstype",
]


def _amp_lines(
    amp_level: str, black_list: tuple[str, ...], dtype: str, cell: str = "net_with_loss"
) -> list[str]:
    """Cast ``cell`` exactly as ``jobs.training._amp.apply_amp`` did in the sweep."""
    ms_dtype = f"mstype.{dtype or 'float16'}"
    if amp_level == FP32_LEVEL:
        return ["# AMP level O0: nothing is cast, the network trains in float32"]
    if not black_list:
        return [f'{cell} = amp.auto_mixed_precision({cell}, "{amp_level}", dtype={ms_dtype})']
    names = ", ".join(black_list)
    lines = [f"# {names}: the layer classes from your model (or mindspore.nn) to keep in float32"]
    if amp_level == "O1":
        # O1 casts only white-listed types, so "black-listing" means removing them.
        lines.append(
            f"{cell} = amp.custom_mixed_precision({cell}, white_list=[c for c in "
            f"amp.get_white_list() if c not in ({names},)], dtype={ms_dtype})"
        )
    elif amp_level == "O3":
        lines.append(f"{cell} = amp.custom_mixed_precision({cell}, black_list=[{names}], dtype={ms_dtype})")
    else:
        lines.append(
            f"{cell} = amp.custom_mixed_precision({cell}, "
            f"black_list=amp.get_black_list() + [{names}], dtype={ms_dtype})"
        )
    return lines


def _scaler_expr(loss_scale: str) -> str | None:
    kind, _, value = (loss_scale or "none").partition(":")
    if kind == "static":
        return f"amp.StaticLossScaler({value or 1024})"
    if kind == "dynamic":
        return f"amp.DynamicLossScaler({value or _DYNAMIC_DEFAULT}, 2, {DYNAMIC_SCALE_WINDOW})"
    return None


def _config(row: Mapping[str, Any] | pd.Series) -> tuple[str, tuple[str, ...], float | None, str | None, str]:
    clip = row["clip"]
    return (
        str(row["amp_level"]),
        tuple(row["black_list"]),
        None if pd.isna(clip) else float(clip),
        _scaler_expr(str(row["loss_scale"])),
        str(row["dtype"]),
    )


def _loss_placement(row: Mapping[str, Any] | pd.Series) -> str:
    value = row.get("loss_placement", "inside") if hasattr(row, "get") else "inside"
    return "outside" if value == "outside" else "inside"


def _cast_block(amp_level: str, black_list: tuple[str, ...], dtype: str, placement: str) -> list[str]:
    if placement == "outside":
        return [
            "# net, loss_fn, optimizer: yours. Cast the network alone, as the sweep did: its output comes",
            "# back in float32, so the loss runs in float32 on it (as in Model(net, loss_fn, opt)).",
            *_amp_lines(amp_level, black_list, dtype, cell="net"),
            "net_with_loss = nn.WithLossCell(net, loss_fn)",
        ]
    return [
        "# net, loss_fn, optimizer: yours. Cast the network *with* its loss, as the sweep did.",
        "net_with_loss = nn.WithLossCell(net, loss_fn)",
        *_amp_lines(amp_level, black_list, dtype),
    ]


def _clip_lines(indent: str, clip_name: str) -> list[str]:
    return [
        f"{indent}# clip by global norm (float32), on the unscaled gradients",
        f"{indent}norm = ops.sqrt(ops.stack([ops.reduce_sum(ops.square(g.astype(mstype.float32))) "
        "for g in grads]).sum())",
        f"{indent}factor = ops.minimum({clip_name} / (norm + {_EPS}), 1.0)",
        f"{indent}grads = tuple(g * factor.astype(g.dtype) for g in grads)",
    ]


def train_step_snippet(row: Mapping[str, Any] | pd.Series) -> str:
    """A hand-written training step (``value_and_grad`` + ``ms.jit``) for one configuration.

    ``row`` needs amp_level, black_list, clip, loss_scale and dtype.
    """
    amp_level, black_list, clip, scaler, dtype = _config(row)
    lines = [*_HEADER, "", *_cast_block(amp_level, black_list, dtype, _loss_placement(row))]
    if scaler:
        lines.append(f"loss_scaler = {scaler}")
    if clip is not None:
        lines.append(
            f"clip = ms.Tensor({clip!r}, mstype.float32)  # a tensor: changing it does not recompile"
        )
    lines += [
        "",
        "def forward(*inputs):",
        "    return loss_scaler.scale(net_with_loss(*inputs))"
        if scaler
        else "    return net_with_loss(*inputs)",
        "",
        "grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)",
        "",
        "@ms.jit",
        "def train_step(*inputs):",
        "    loss, grads = grad_fn(*inputs)",
    ]
    if scaler:
        lines += [
            "    loss = loss_scaler.unscale(loss)",
            "    grads = loss_scaler.unscale(grads)",
            "    is_finite = amp.all_finite(grads)",
            "    if is_finite:  # a step with overflowed gradients is skipped",
        ]
        body = "        "
    else:
        body = "    "
    if clip is not None:
        lines += _clip_lines(body, "clip")
    lines.append(f"{body}loss = ops.depend(loss, optimizer(grads))")
    if scaler and scaler.startswith("amp.Dynamic"):
        lines.append("    loss = ops.depend(loss, loss_scaler.adjust(is_finite))")
    lines += [
        "    return loss",
        "",
        "for inputs in dataset.create_tuple_iterator():",
        "    loss = train_step(*inputs)",
    ]
    return "\n".join(lines)


def model_snippet(row: Mapping[str, Any] | pd.Series) -> str:
    """The same configuration for ``mindspore.train.Model``.

    Without clipping and loss scaling Model's own ``TrainOneStepCell`` is
    enough; otherwise a subclass does the step the sweep did.
    """
    amp_level, black_list, clip, scaler, dtype = _config(row)
    placement = _loss_placement(row)
    cast = _cast_block(amp_level, black_list, dtype, placement)
    lines = [*_HEADER, "from mindspore.train import Model", ""]
    if scaler is None and clip is None and placement == "outside":
        return "\n".join(
            [
                *lines,
                *cast[:-1],  # Model wraps the loss itself, on the cast network's float32 output
                "",
                '# amp_level="O0": the network is already cast; Model\'s own O2 would cast it again',
                "# and add a dynamic loss scaling the sweep did not test",
                'model = Model(net, loss_fn=loss_fn, optimizer=optimizer, amp_level="O0")',
                "model.train(epochs, dataset)",
            ]
        )
    lines += [*cast, ""]
    if scaler is None and clip is None:
        return "\n".join(
            [
                *lines,
                '# amp_level="O0": the network is already cast; Model\'s own O2 would cast it again',
                "# and add a dynamic loss scaling the sweep did not test",
                'model = Model(net_with_loss, optimizer=optimizer, amp_level="O0")',
                "model.train(epochs, dataset)",
            ]
        )
    doc = " and ".join(
        ([f"loss scaling ({'dynamic' if scaler and 'Dynamic' in scaler else 'static'})"] if scaler else [])
        + (["clipping by global norm"] if clip is not None else [])
    )
    args = (["clip"] if clip is not None else []) + (["loss_scaler"] if scaler else [])
    lines += [
        "class TrainStep(nn.TrainOneStepCell):",
        f'    """One training step with {doc}, as the sweep ran it."""',
        "",
        f"    def __init__(self, network, optimizer, {', '.join(args)}):",
        "        super().__init__(network, optimizer)",
    ]
    if clip is not None:
        lines.append("        self.clip = ms.Tensor(clip, mstype.float32)")
    if scaler:
        lines.append("        self.loss_scaler = loss_scaler")
    lines += ["", "    def construct(self, *inputs):", "        loss = self.network(*inputs)"]
    if scaler:
        lines += [
            "        sens = ops.ones_like(loss) * self.loss_scaler.scale_value.astype(loss.dtype)",
            "        grads = self.grad(self.network, self.weights)(*inputs, sens)",
            "        grads = self.loss_scaler.unscale(grads)",
            "        is_finite = amp.all_finite(grads)",
            "        if is_finite:  # a step with overflowed gradients is skipped",
        ]
        body = "            "
    else:
        lines.append("        grads = self.grad_no_sens(self.network, self.weights)(*inputs)")
        body = "        "
    if clip is not None:
        lines += _clip_lines(body, "self.clip")
    lines.append(f"{body}loss = ops.depend(loss, self.optimizer(grads))")
    if scaler and "Dynamic" in scaler:
        lines.append("        loss = ops.depend(loss, self.loss_scaler.adjust(is_finite))")
    values = ([f"clip={clip!r}"] if clip is not None else []) + ([f"loss_scaler={scaler}"] if scaler else [])
    lines += [
        "        return loss",
        "",
        f"train_net = TrainStep(net_with_loss, optimizer, {', '.join(values)})",
        "# already cast and wrapped: Model runs train_net as it is (its amp_level stays O0)",
        "model = Model(train_net)",
        "model.train(epochs, dataset)",
    ]
    return "\n".join(lines)


def mindspore_snippet(row: Mapping[str, Any] | pd.Series) -> str:
    """The hand-written training step; kept as the short name used by the report."""
    return train_step_snippet(row)


def snippets(row: Mapping[str, Any] | pd.Series) -> dict[str, str]:
    """Both forms, keyed as in ``recommendation.json``'s ``code`` object."""
    return {"train_step": train_step_snippet(row), "model": model_snippet(row)}


def recommendation_code(rec: Recommendation) -> dict[str, str] | None:
    """The code of a recommendation: its configuration's, or the FP32 fallback's when none is stable."""
    config = rec.config if rec.config else (rec.fallback or {}).get("config")
    return None if config is None else snippets(config)
