"""Turn a ranked configuration into the MindSpore code a user pastes: a hand-written ``train_step`` and
``mindspore.train.Model`` (docs/reading-the-report.md, "The code").

Public MindSpore APIs only, written from the Parquet values (nothing here imports MindSpore), and both do
what the sweep's trainer did, so the report's numbers hold for them: the cast is
``jobs.training._amp.apply_amp``'s (``keep_in_float32``, or ``amp.auto_mixed_precision`` where nothing is
listed: the same bit for bit) and follows the trials' ``loss_placement``; the clip is by the global norm of
the unscaled gradients, in float32; with loss scaling a step whose gradients are not finite is skipped, and
a dynamic scaler moves every ``DYNAMIC_SCALE_WINDOW`` finite steps. ``Model`` gets the network cast already
and no ``amp_level`` (:data:`MODEL_AMP_LEVEL_NOTE` says why); clipping or loss scaling needs a
``TrainOneStepCell`` subclass, which ``Model`` runs as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ampsweep.contracts import DYNAMIC_SCALE_WINDOW, FP32_LEVEL, LOSS_INSIDE, LOSS_OUTSIDE, Configuration

from .._model import Recommendation

_DYNAMIC_DEFAULT = "2**16"
_EPS = "1e-6"

_HEADER = [
    "import mindspore as ms",
    "from mindspore import amp, nn, ops",
    "import mindspore.common.dtype as mstype",
]


#: what ``Model(..., amp_level="O2")`` would do that the sweep did not (the Model snippet says so)
MODEL_AMP_LEVEL_NOTE = (
    "# No amp_level: the network is cast above, and Model's default (O0) casts nothing more.",
    '# Model(..., amp_level="O2") would cast the whole network to float16 again (the layers kept in',
    "# float32 included) and, on Ascend/GPU, add a DynamicLossScaleManager (scale 2**24, window 2000)",
    "# that the sweep did not use; on CPU it needs loss_scale_manager=None.",
)


def _model_note(amp_level: str) -> tuple[str, ...]:
    return () if amp_level == FP32_LEVEL else MODEL_AMP_LEVEL_NOTE


#: ``ampsweep.amp.keep_in_float32`` as the snippet pastes it: the same steps, without the
#: docstring and the error naming a Cell that refuses float32 (``tests/test_pasted_code.py``
#: checks that both compute the same, bit for bit)
KEEP_IN_FLOAT32 = (
    "# keep_in_float32: `from ampsweep.amp import keep_in_float32` (pip install ampsweep), or paste it.",
    "# MindSpore's public API only; under O2/O3 it replaces amp.auto_mixed_precision, which computes the",
    "# same wherever it works, but wraps listed Cells (tuple outputs and attribute reads break).",
    'def keep_in_float32(network, classes, amp_level="O2", dtype=mstype.float16):',
    '    """Cast `network` for `amp_level` with every instance of `classes` (subclasses too) in float32."""',
    '    if amp_level == "O0":',
    "        return network",
    '    classes = tuple(classes) + (tuple(amp.get_black_list()) if amp_level == "O2" else ())',
    '    if amp_level != "O1":',
    "        network.to_float(dtype)",
    "    kept = [(name, cell) for name, cell in network.cells_and_names() if isinstance(cell, classes)]",
    "    names = [name for name, _ in kept]",
    "    for name, cell in kept:",
    "        cell.to_float(mstype.float32)",
    '        outer = not any(o != name and (o == "" or name.startswith(o + ".")) for o in names)',
    '        if name and outer and amp_level != "O1":  # hand the parent its output in dtype, as AMP does',
    "            cell.register_forward_hook(outputs_to(dtype))",
    '    if amp_level == "O1":  # its rewrite leaves a Cell whose precision was set as it is',
    '        return amp.auto_mixed_precision(network, "O1", dtype=dtype)',
    "    network.register_forward_hook(outputs_to(mstype.float32))",
    "    return network",
    "",
    "",
    "def outputs_to(dtype):",
    '    """A forward hook: the Cell hands on its floating outputs (also in a tuple, list or dict) in `dtype`."""',
    "    floats = (mstype.float16, mstype.bfloat16, mstype.float32, mstype.float64)",
    "",
    "    def cast(value):",
    "        if isinstance(value, ms.Tensor) and value.dtype in floats and value.dtype != dtype:",
    "            return value.astype(dtype)",
    "        return value",
    "",
    "    def hook(cell, inputs, output):",
    "        if isinstance(output, tuple):",
    "            return tuple([cast(v) for v in output])",
    "        if isinstance(output, list):",
    "            return [cast(v) for v in output]",
    "        if isinstance(output, dict):",
    "            return {k: cast(v) for k, v in output.items()}",
    "        return cast(output)",
    "",
    "    return hook",
)


def _amp_lines(
    amp_level: str, black_list: tuple[str, ...], dtype: str, cell: str = "net_with_loss"
) -> list[str]:
    """Cast ``cell`` exactly as ``jobs.training._amp.apply_amp`` did in the sweep.

    Without a black list, ``amp.auto_mixed_precision`` at the level (what
    ``keep_in_float32`` computes then, bit for bit); with one,
    ``keep_in_float32`` (:data:`KEEP_IN_FLOAT32`).
    """
    ms_dtype = f"mstype.{dtype or 'float16'}"
    if amp_level == FP32_LEVEL:
        return ["# AMP level O0: nothing is cast, the network trains in float32"]
    if not black_list:
        return [f'{cell} = amp.auto_mixed_precision({cell}, "{amp_level}", dtype={ms_dtype})']
    names = ", ".join(black_list)
    return [
        f"# {names}: kept in float32 by the sweep (your classes, or import them from mindspore.nn)",
        f'{cell} = keep_in_float32({cell}, ({names}{"," if len(black_list) == 1 else ""}), "{amp_level}", {ms_dtype})',
    ]


def _preamble(amp_level: str, black_list: tuple[str, ...], model: bool = False) -> list[str]:
    """The imports, and ``keep_in_float32`` where a black list is applied."""
    lines = [*_HEADER, *(["from mindspore.train import Model"] if model else []), ""]
    if black_list and amp_level != FP32_LEVEL:
        lines += ["", *KEEP_IN_FLOAT32, "", ""]
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
    """Where the configuration's loss ran; a row that does not say ran it inside, as old sweeps did."""
    return LOSS_OUTSIDE if row.get("loss_placement", LOSS_INSIDE) == LOSS_OUTSIDE else LOSS_INSIDE


def _literal(text: str) -> str:
    """A swept argument's value text (``arg_text``) as Python source: '"float32"', '0.001', 'True'."""
    try:
        return repr(json.loads(text))
    except ValueError:
        return repr(text)


def _arguments(row: Mapping[str, Any] | pd.Series) -> list[str]:
    """The swept workload arguments the configuration sets, as the line that builds the user's network."""
    swept = Configuration.from_row(dict(row)).workload_args
    if not swept:
        return []
    call = ", ".join(f"{name}={_literal(value)}" for name, value in swept)
    return [
        "# build net with the arguments the sweep chose (your factory's keyword arguments, or the same",
        f"# fields of your model's config): make(seed, {call})",
    ]


def _devices(row: Mapping[str, Any] | pd.Series) -> int:
    value = row.get("devices", 1) if hasattr(row, "get") else 1
    return 1 if value is None or pd.isna(value) else int(value)


def _data_parallel(row: Mapping[str, Any] | pd.Series) -> list[str]:
    """The data-parallel setup the trials ran with (``devices_per_trial`` > 1); none on one device."""
    devices = _devices(row)
    if devices <= 1:
        return []
    return [
        "from mindspore.communication import init",
        "",
        f"# one process per device, {devices} of them (msrun --worker_num={devices} --local_worker_num={devices} ...):",
        "# each trains on its part of the global batch, split evenly along the first axis",
        "init()",
        "ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)",
        "",
    ]


def _cast_block(
    amp_level: str,
    black_list: tuple[str, ...],
    dtype: str,
    placement: str,
    arguments: list[str] | None = None,
) -> list[str]:
    if arguments:
        return [*arguments, *_cast_block(amp_level, black_list, dtype, placement)]
    if placement == LOSS_OUTSIDE:
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
    parallel = _data_parallel(row)
    lines = [
        *_preamble(amp_level, black_list),
        *parallel,
        *_cast_block(amp_level, black_list, dtype, _loss_placement(row), _arguments(row)),
    ]
    if parallel:
        lines.append("grad_reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)")
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
    if parallel:
        lines.append("    grads = grad_reducer(grads)  # the mean over the ranks, before the clip")
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
    cast = _cast_block(amp_level, black_list, dtype, placement, _arguments(row))
    lines = [*_preamble(amp_level, black_list, model=True), *_data_parallel(row)]
    if scaler is None and clip is None and placement == LOSS_OUTSIDE:
        return "\n".join(
            [
                *lines,
                *cast[:-1],  # Model wraps the loss itself, on the cast network's float32 output
                "",
                *_model_note(amp_level),
                "model = Model(net, loss_fn=loss_fn, optimizer=optimizer)",
                "model.train(epochs, dataset)",
            ]
        )
    lines += [*cast, ""]
    if scaler is None and clip is None:
        return "\n".join(
            [
                *lines,
                *_model_note(amp_level),
                "model = Model(net_with_loss, optimizer=optimizer)",
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
    # TrainOneStepCell made grad_reducer a DistributedGradReducer under DATA_PARALLEL (identity on one device)
    reduce = (
        ["        grads = self.grad_reducer(grads)  # the ranks' mean, before the clip"]
        if _devices(row) > 1
        else []
    )
    if scaler:
        lines += [
            "        sens = ops.ones_like(loss) * self.loss_scaler.scale_value.astype(loss.dtype)",
            "        grads = self.grad(self.network, self.weights)(*inputs, sens)",
            *reduce,
            "        grads = self.loss_scaler.unscale(grads)",
            "        is_finite = amp.all_finite(grads)",
            "        if is_finite:  # a step with overflowed gradients is skipped",
        ]
        body = "            "
    else:
        lines += ["        grads = self.grad_no_sens(self.network, self.weights)(*inputs)", *reduce]
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
        "# already cast and wrapped: Model runs train_net as it is",
        *_model_note(amp_level),
        "model = Model(train_net)",
        "model.train(epochs, dataset)",
    ]
    return "\n".join(lines)


def snippets(row: Mapping[str, Any] | pd.Series) -> dict[str, str]:
    """Both forms, keyed as in ``recommendation.json``'s ``code`` object."""
    return {"train_step": train_step_snippet(row), "model": model_snippet(row)}


def recommendation_code(rec: Recommendation) -> dict[str, str] | None:
    """The code of a recommendation: its configuration's, or the FP32 fallback's when none is stable."""
    config = rec.config if rec.config else (rec.fallback or {}).get("config")
    return None if config is None else snippets(config)
