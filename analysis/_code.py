"""Turn a ranked configuration into the MindSpore code a user pastes.

The report's point is "what to change in the training script", so the
recommendation is rendered as code using only APIs that exist in MindSpore
(``amp.auto_mixed_precision``, ``amp.custom_mixed_precision``,
``amp.StaticLossScaler``/``DynamicLossScaler``, ``amp.all_finite``). Nothing
here imports MindSpore: the text is generated from the Parquet values alone.
"""

from __future__ import annotations

import pandas as pd

_DYNAMIC_DEFAULT = "2**16"


def _amp_lines(amp_level: str, black_list: tuple[str, ...], dtype: str) -> list[str]:
    ms_dtype = f"mstype.{dtype or 'float16'}"
    if amp_level == "O0":
        return ["# AMP level O0: keep the network in float32 (nothing is cast)."]
    if not black_list:
        return [f'net = amp.auto_mixed_precision(net, "{amp_level}", dtype={ms_dtype})']
    names = ", ".join(black_list)
    lines = [f"# {names}: the layer classes from your model (or mindspore.nn) to keep in float32"]
    if amp_level == "O1":
        # O1 casts only white-listed types, so "black-listing" means removing them.
        lines.append(
            f"net = amp.custom_mixed_precision(net, white_list=[c for c in amp.get_white_list() "
            f"if c not in ({names},)], dtype={ms_dtype})"
        )
    elif amp_level == "O3":
        lines.append(f"net = amp.custom_mixed_precision(net, black_list=[{names}], dtype={ms_dtype})")
    else:
        lines.append(
            f"net = amp.custom_mixed_precision(net, black_list=amp.get_black_list() + [{names}], "
            f"dtype={ms_dtype})"
        )
    return lines


def _scaler_line(loss_scale: str) -> str | None:
    kind, _, value = (loss_scale or "none").partition(":")
    if kind == "static":
        return f"loss_scaler = amp.StaticLossScaler({value or 1024})"
    if kind == "dynamic":
        return f"loss_scaler = amp.DynamicLossScaler({value or _DYNAMIC_DEFAULT}, 2, 1000)"
    return None


def mindspore_snippet(row: pd.Series | dict) -> str:
    """Code for one configuration row (needs amp_level, black_list, clip, loss_scale, dtype)."""
    amp_level = str(row["amp_level"])
    black_list = tuple(row["black_list"])
    clip = row["clip"]
    scaler = _scaler_line(str(row["loss_scale"]))
    has_clip = not pd.isna(clip)
    lines = [
        "import mindspore as ms",
        "from mindspore import amp, ops",
        "import mindspore.common.dtype as mstype",
        "",
        "# net: the network *with* its loss cell, so the loss itself is cast (or kept in FP32) too",
        *_amp_lines(amp_level, black_list, str(row["dtype"])),
    ]
    if scaler is None and not has_clip:
        return "\n".join(lines)
    if scaler:
        lines.append(scaler)
    if has_clip:
        lines.append(
            f"clip = ms.Tensor({float(clip)!r}, mstype.float32)  # a tensor, so changing it does not recompile"
        )
    lines += [
        "",
        "def forward(*inputs):",
        "    loss = net(*inputs)",
        "    return loss_scaler.scale(loss)" if scaler else "    return loss",
        "",
        "grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)",
        "",
        "@ms.jit",
        "def train_step(*inputs):",
        "    loss, grads = grad_fn(*inputs)",
    ]
    body = "    "
    if scaler:
        lines += [
            "    loss = loss_scaler.unscale(loss)",
            "    grads = loss_scaler.unscale(grads)",
            "    is_finite = amp.all_finite(grads)",
            "    if is_finite:  # a step with overflowed gradients is skipped",
        ]
        body = "        "
    if has_clip:
        lines += [
            f"{body}# clip by global norm, on the unscaled gradients:",
            f"{body}norm = ops.sqrt(sum(ops.reduce_sum(ops.square(g.astype(mstype.float32))) for g in grads))",
            f"{body}grads = tuple(g * ops.minimum(clip / (norm + 1e-6), 1.0).astype(g.dtype) for g in grads)",
        ]
    lines.append(f"{body}optimizer(grads)")
    if scaler and scaler.startswith("loss_scaler = amp.Dynamic"):
        lines.append("    loss_scaler.adjust(is_finite)")
    lines.append("    return loss")
    return "\n".join(lines)
