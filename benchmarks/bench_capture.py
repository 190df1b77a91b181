"""Issue: "Per-step capture costs at most 5 % of the step time of a bare training loop".

ampsweep's step (``jobs.training._trainer.CompiledStep``) computes, inside the jitted
graph, the global gradient norm, the clip factor and three statistics per
parameter (norm, max |g|, non-finite count), and ``_train`` copies the metric
vectors to the host every ``BLOCK_STEPS`` steps. This benchmark prices all of
that against the loop a user would write without ampsweep: the same network and
loss, built and cast the same way (``NetworkWithLoss`` + ``apply_amp``), with
``value_and_grad`` and the optimizer in one jitted step that returns only the
loss, and one host copy at the end.

How it is measured, and why:

* Batches are converted to Tensors once, before timing, for every loop alike,
  so data generation is not part of either step time.
* Every loop's graph is compiled and warmed up first.
* The process pins itself to one core and uses one op thread, as a CPU worker
  does (``jobs._worker``); unpinned, MindSpore's runtime threads and the
  machine's other tenants make single rounds vary by a factor of five.
* The machine is shared, so absolute times drift within a minute. The loops
  therefore run in short rounds, interleaved, in an order that reverses every
  round, and the overhead is the ratio *within* a round; the table shows its
  median and its range over rounds. Rounds are whole multiples of
  ``BLOCK_STEPS`` so each one holds complete block copies.
* The baseline hands its loss back as a 1-element tensor, because a 0-d output
  puts MindSpore 2.10's CPU runtime on a much slower path; that variant is
  timed too, so the choice is visible.
* Where the time goes is measured, not guessed, with two intermediate loops: the
  bare loop plus only the global-norm clipping, and ampsweep's step without the
  block copies (one copy at the end, like the bare loop).
* All loops start from the same seed and see the same batches with clipping
  off, so their losses must agree exactly; the section says whether they did.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORKLOAD = "ampsweep.jobs.workloads.seed_repro:make"
#: (AMP level, black list, dtype): the fixed configuration of the issue and the FP32 baseline.
POLICIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("O2", ("CustomNorm",), "float16"),
    ("O0", (), "float16"),
)
ROUNDS = 20
ROUND_STEPS = 100  # four blocks of 25: short rounds track the machine's drifting load
WARMUP_STEPS = 50
DISTINCT_BATCHES = 300  # cycled; the workload's clock column stays in the range it was built for
THRESHOLD = 0.05
LAYER_EVERY = 50  # TrialConfig's default layer_every: steps between sampled per-parameter statistics
_STEPS_RUN: dict[int, int] = {}  # id(step) -> steps the ampsweep loop has run on it so far
_EPS = 1e-6


def _log(message: str) -> None:
    print(f"[bench_capture] {message}", file=sys.stderr, flush=True)


def _config(
    level: str,
    black_list: tuple[str, ...],
    dtype: str,
    workload: str = WORKLOAD,
    workload_args: dict[str, Any] | None = None,
) -> Any:
    from ampsweep.jobs import TrialConfig

    # the bare loops cast network and loss together (NetworkWithLoss), so ampsweep's step must too
    placement = {"loss_placement": "inside"} if hasattr(TrialConfig, "loss_placement") else {}
    return TrialConfig(
        **placement,
        workload=workload,
        workload_args=dict(workload_args or {}),
        steps=ROUND_STEPS,
        abort_after=10,
        amp_level=level,
        black_list=black_list,
        clip=None,
        loss_scale="none",
        dtype=dtype,
        seed=0,
    )


def _fresh_workload(config: Any) -> Any:
    """Seeded exactly as ``run_trial`` seeds, so every loop starts from the same weights."""
    import mindspore as ms

    from ampsweep.jobs import build_workload

    ms.set_seed(config.seed)
    np.random.seed(config.seed)
    return build_workload(config.workload, config.seed, config.workload_args)


def _batches(config: Any, count: int | None = None) -> list[tuple[Any, ...]]:
    from ampsweep.jobs.training._batches import to_tensors

    stream = iter(_fresh_workload(config).batches)
    return [to_tensors(next(stream)) for _ in range(count or DISTINCT_BATCHES)]


def _bare_parts(config: Any) -> tuple[Any, Any]:
    """The user's own loop: loss cell cast for the policy, value_and_grad, optimizer."""
    import mindspore as ms

    from ampsweep.jobs.training._amp import apply_amp, known_layer_types, resolve_black_list
    from ampsweep.jobs.training._loss_cell import NetworkWithLoss

    workload = _fresh_workload(config)
    known = known_layer_types([workload.network, workload.loss_fn])
    loss_cell = apply_amp(
        NetworkWithLoss(workload.network, workload.loss_fn),
        config.amp_level,
        resolve_black_list(config.black_list, known),
        config.dtype,
    )
    optimizer = workload.optimizer(workload.network.trainable_params())
    return ms.value_and_grad(loss_cell, None, optimizer.parameters), optimizer


def make_bare_step(config: Any, *, scalar_loss: bool = False) -> Callable[..., Any]:
    """One jitted step returning only the loss; nothing else leaves the graph.

    The loss leaves as a 1-element tensor. Returned as a 0-d tensor
    (``scalar_loss=True``) the very same step takes two to three times as long on
    MindSpore 2.10's CPU backend (the Python thread spins while the runtime
    hands the scalar over), which would flatter ampsweep; that variant is timed
    only to show the effect, never used as the baseline.
    """
    import mindspore as ms
    from mindspore import ops

    grad_fn, optimizer = _bare_parts(config)

    def bare_step(*batch: Any) -> Any:
        loss, grads = grad_fn(*batch)
        return ops.depend(loss, optimizer(grads)).reshape((1,))

    def bare_step_scalar(*batch: Any) -> Any:
        loss, grads = grad_fn(*batch)
        return ops.depend(loss, optimizer(grads))

    return ms.jit(bare_step_scalar if scalar_loss else bare_step)


def make_clip_only_step(config: Any) -> Callable[..., Any]:
    """The bare step plus global-norm clipping as DESIGN.md writes it, returning loss and norm.

    This is the least a clipping sweep must compute; the difference to ampsweep's
    step is the price of the per-parameter statistics.
    """
    import mindspore as ms
    from mindspore import ops
    from mindspore.common import dtype as mstype

    grad_fn, optimizer = _bare_parts(config)
    one = ms.Tensor(1.0, mstype.float32)

    def clip_step(clip: Any, *batch: Any) -> Any:
        loss, grads = grad_fn(*batch)
        squares = ops.stack([ops.reduce_sum(ops.square(g.astype(mstype.float32))) for g in grads])
        norm = ops.sqrt(ops.reduce_sum(squares))
        factor = ops.select(norm > clip, clip / (norm + _EPS), one)
        clipped = tuple(g * factor.astype(g.dtype) for g in grads)
        loss = ops.depend(loss, optimizer(clipped))
        return ops.stack([loss.astype(mstype.float32), norm])

    return ms.jit(clip_step)


# --- the loops being timed: each runs len(batches) steps and returns the last loss ---------------


def loop_bare(step: Callable[..., Any], batches: Sequence[tuple[Any, ...]]) -> float:
    loss = None
    for batch in batches:
        loss = step(*batch)
    return float(loss.asnumpy().reshape(-1)[0])


def loop_clip_only(step: Callable[..., Any], clip: Any, batches: Sequence[tuple[Any, ...]]) -> float:
    out = None
    for batch in batches:
        out = step(clip, *batch)
    return float(out.asnumpy()[0])


def loop_ampsweep(step: Any, clip: Any, batches: Sequence[tuple[Any, ...]]) -> float:
    """What ``jobs.training._trainer._train`` does per step: keep outputs, stack and copy each block.

    Where the step has a sampled variant (``CompiledStep.sampled``, the lean
    step's per-parameter statistics), every ``LAYER_EVERY``-th step runs it, as
    ``_train`` does; its statistics stay on the device, as there.
    """
    from mindspore import ops

    from ampsweep.jobs.training._trainer import BLOCK_STEPS

    sampled = getattr(step, "sampled", None)
    pending: list[Any] = []
    kept: list[Any] = []
    block = None
    # count steps across calls (warm-up and every round), so 1 step in LAYER_EVERY is sampled
    # however short a round is
    first = _STEPS_RUN.get(id(step), 0)
    _STEPS_RUN[id(step)] = first + len(batches)
    for index, batch in enumerate(batches, start=first):
        if sampled is not None and index % LAYER_EVERY == 0:
            head, stats = sampled(clip, batch)
            kept.append(stats)
            pending.append(head)
        else:
            pending.append(step(clip, batch))
        if len(pending) == BLOCK_STEPS:
            block = ops.stack(pending).asnumpy()
            pending = []
    if pending:
        block = ops.stack(pending).asnumpy()
    return float(block[-1, 0])


def loop_ampsweep_no_copies(step: Any, clip: Any, batches: Sequence[tuple[Any, ...]]) -> float:
    """ampsweep's graph with the bare loop's host traffic: one copy at the end."""
    out = None
    for batch in batches:
        out = step(clip, batch)
    return float(out.asnumpy()[0])


@dataclass
class Variant:
    """One timed loop and its per-round wall times (ms/step)."""

    key: str
    label: str
    run: Callable[[Sequence[tuple[Any, ...]]], float]
    ms: list[float] = field(default_factory=list)
    last_loss: float = float("nan")


def _variants(config: Any, keys: Sequence[str] | None = None) -> tuple[list[Variant], int]:
    """The loops to time (``keys``: a subset, each built only if asked for)."""
    from ampsweep.jobs.training._trainer import BLOCK_STEPS

    CompiledStep = _compiled_step_class()

    wanted = set(keys or ("bare", "bare0d", "clip", "nocopy", "ampsweep"))

    def build(key: str, make: Callable[[], Any]) -> Any:
        return make() if key in wanted else None

    bare = build("bare", lambda: make_bare_step(config))
    bare_scalar = build("bare0d", lambda: make_bare_step(config, scalar_loss=True))
    clip_only = build("clip", lambda: make_clip_only_step(config))
    full = build("ampsweep", lambda: CompiledStep(config, _fresh_workload(config)))
    full_nocopy = build("nocopy", lambda: CompiledStep(config, _fresh_workload(config)))
    some_step = full or full_nocopy
    off = some_step.clip_tensor(None) if some_step is not None else _no_clip_tensor()
    variants = [
        Variant("bare", "bare loop (**baseline**)", lambda b: loop_bare(bare, b)),
        Variant("bare0d", "bare loop, loss returned as a 0-d tensor", lambda b: loop_bare(bare_scalar, b)),
        Variant("clip", "bare + global norm + clipping", lambda b: loop_clip_only(clip_only, off, b)),
        Variant(
            "nocopy",
            "ampsweep step, metrics copied once at the end",
            lambda b: loop_ampsweep_no_copies(full_nocopy, off, b),
        ),
        Variant(
            "ampsweep",
            f"**ampsweep step + block copies every {BLOCK_STEPS} steps (as `_train`)**",
            lambda b: loop_ampsweep(full, off, b),
        ),
    ]
    variants = [v for v in variants if v.key in wanted]
    params = len((full or full_nocopy).layer_names) if (full or full_nocopy) is not None else 0
    return variants, params


def _no_clip_tensor() -> Any:
    import mindspore as ms
    from mindspore.common import dtype as mstype

    return ms.Tensor(float(np.finfo(np.float32).max), mstype.float32)


def measure(
    config: Any,
    *,
    rounds: int | None = None,
    round_steps: int | None = None,
    warmup: int | None = None,
    distinct: int | None = None,
    keys: Sequence[str] | None = None,
) -> tuple[list[Variant], float, int]:
    """Compile and warm every loop, then time them in interleaved rounds."""
    rounds = rounds or ROUNDS
    round_steps = round_steps or ROUND_STEPS
    warmup = warmup or WARMUP_STEPS
    distinct = distinct or DISTINCT_BATCHES
    batches = _batches(config, distinct)
    started = time.perf_counter()
    variants, params = _variants(config, keys)
    for variant in variants:  # first call compiles; the rest warms caches and allocators
        variant.run(batches[:warmup])
    compile_s = time.perf_counter() - started
    cycled = batches + batches
    for round_index in range(rounds):
        first = (round_index * round_steps) % distinct
        chunk = cycled[first : first + round_steps]
        order = variants if round_index % 2 == 0 else variants[::-1]
        for variant in order:
            started = time.perf_counter()
            variant.last_loss = variant.run(chunk)
            variant.ms.append((time.perf_counter() - started) * 1000.0 / len(chunk))
    return variants, compile_s, params


def _ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    return [a / b - 1.0 for a, b in zip(numerator, denominator)]


def _diff(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of the paired difference, ms/step."""
    return statistics.median(a - b for a, b in zip(numerator, denominator))


def _pct(value: float) -> str:
    return f"{round(value * 100) or 0:+.0f} %"  # "or 0" turns -0 into +0


def _range(values: list[float]) -> str:
    return f"{_pct(statistics.median(values))} ({_pct(min(values))} … {_pct(max(values))})"


def _policy_name(level: str, black_list: tuple[str, ...], dtype: str) -> str:
    if level == "O0":
        return "O0 (FP32)"
    return f"{level}, black_list={list(black_list)}, {dtype}"


@dataclass
class PolicyResult:
    """One policy's table and the figures the verdict needs."""

    name: str
    table: str
    overhead: float
    bare_ms: float
    ampsweep_ms: float
    parts_ms: dict[str, float]
    params: int
    losses_agree: bool
    scalar_slowdown: float  # median ratio, 0-d-loss bare loop over the baseline


def measure_policy(policy: tuple[str, tuple[str, ...], str]) -> PolicyResult:
    config = _config(*policy)
    name = _policy_name(*policy)
    _log(f"{name}: compiling and warming 5 loops, then {ROUNDS} rounds x {ROUND_STEPS} steps each")
    variants, compile_s, params = measure(config)
    by_key = {v.key: v for v in variants}
    bare, full = by_key["bare"], by_key["ampsweep"]
    lines = [
        f"### {name}",
        "",
        f"{ROUNDS} rounds × {ROUND_STEPS} steps per loop, interleaved (order reversed every round); "
        f"compiling and warming the five loops took {compile_s:.1f} s. Overhead is the ratio to the "
        "baseline within the same round: median (min … max over rounds).",
        "",
        "| loop | median ms/step | overhead vs baseline |",
        "|---|---:|---:|",
    ]
    for variant in variants:
        over = "—" if variant is bare else _range(_ratios(variant.ms, bare.ms))
        lines.append(f"| {variant.label} | {statistics.median(variant.ms):.2f} | {over} |")
    losses = {v.key: v.last_loss for v in variants}
    agree = len({np.float32(x).tobytes() for x in losses.values()}) == 1
    lines += [
        "",
        "Last loss of each loop: "
        + ", ".join(f"{k} {v:.6g}" for k, v in losses.items())
        + (
            " — identical, so every loop trained the same model the same way."
            if agree
            else " — **they differ**, so the loops did not compute the same training."
        ),
    ]
    parts = {
        "clip": _diff(by_key["clip"].ms, bare.ms),
        "stats": _diff(by_key["nocopy"].ms, by_key["clip"].ms),
        "copies": _diff(full.ms, by_key["nocopy"].ms),
    }
    return PolicyResult(
        name=name,
        table="\n".join(lines),
        overhead=statistics.median(_ratios(full.ms, bare.ms)),
        bare_ms=statistics.median(bare.ms),
        ampsweep_ms=statistics.median(full.ms),
        parts_ms=parts,
        params=params,
        losses_agree=agree,
        scalar_slowdown=statistics.median(a / b for a, b in zip(by_key["bare0d"].ms, bare.ms)),
    )


def _pin_to_one_core() -> str:
    """Run like a CPU worker, which pins itself to one core; returns a note for the section."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity on this OS)"
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return f"pinned to core {core}"


def where_the_time_goes(results: list[PolicyResult]) -> str:
    """The explanation, with every claim tied to a figure measured in this run."""
    bare = statistics.median(r.bare_ms for r in results)
    clip = [r.parts_ms["clip"] / r.bare_ms for r in results]
    stats = [r.parts_ms["stats"] / r.bare_ms for r in results]
    copies = [r.parts_ms["copies"] / r.bare_ms for r in results]
    params = results[0].params

    def span(values: list[float]) -> str:
        low, high = min(values), max(values)
        return _pct(low) if len(values) == 1 or abs(high - low) < 0.005 else f"{_pct(low)} … {_pct(high)}"

    copy_note = (
        "the block copies are lost in the noise"
        if max(abs(c) for c in copies) <= THRESHOLD
        else f"the block copies measure {span(copies)} of a bare step, within the rounds' noise"
    )
    if _lean_step():
        return (
            f"Where the time goes: a bare step of this network is about 1.5 MFLOP yet takes {bare:.1f} ms, "
            "so its time is the dispatch of many small kernels. ampsweep's ordinary (lean) step adds the "
            f"global norm over the {params} parameter tensors, the clip factor and a 4-element metric "
            "vector; the per-parameter statistics run only on every "
            f"{LAYER_EVERY}th step (the sampled variant, as `_train` runs it). Measured per step, relative "
            f"to the bare step: global norm + clipping {span(clip)}, ampsweep's step beyond that "
            f"{span(stats)}, and {copy_note}. Global-norm clipping, which any clipping sweep must compute, "
            f"{'exceeds' if min(clip) > THRESHOLD else 'stays within'} the 5 % budget on its own here."
        )
    return (
        f"Where the time goes: not into arithmetic. A bare step of this network is about 1.5 MFLOP "
        f"(forward and backward through 17→192→192→10 on 6 rows) yet takes {bare:.1f} ms, so its time "
        "is the dispatch of many small kernels. ampsweep's graph adds a fixed set of small kernels for "
        f"each of the {params} parameter tensors (float32 cast, square and sum for the norm; abs and max; "
        "isfinite, not, cast and sum for the non-finite count; the multiply by the clip factor) and the "
        "stacks and concat that build the metric vector. Measured per step, relative to the bare step: "
        f"global norm + clipping {span(clip)}, the per-parameter statistics on top of that "
        f"{span(stats)}, and {copy_note}. The cost is per parameter tensor, not per element, so the "
        "relative overhead is at its worst on a model this small and falls as the step's arithmetic "
        "grows; on this workload even global-norm clipping alone, which any clipping sweep must "
        f"compute, {'exceeds' if min(clip) > THRESHOLD else 'stays within'} the 5 % budget."
    )


def _lean_step() -> bool:
    """Whether the trainer's step has a separate sampled variant (issue 12's lean step)."""
    return hasattr(_compiled_step_class(), "sampled")


def _compiled_step_class() -> Any:
    """``CompiledStep`` wherever this tree keeps it (its own module, or the trainer)."""
    try:
        from ampsweep.jobs.training._step import CompiledStep
    except ImportError:
        from ampsweep.jobs.training._trainer import CompiledStep
    return CompiledStep


def run(tiny: bool = False) -> str:
    """Measure every policy, then the realistic model, and return the Markdown section.

    ``tiny=True`` (the smoke test) shrinks rounds and steps to a few; the
    figures then mean nothing, but every row is produced.
    """
    import mindspore as ms

    from ampsweep.jobs.training._trainer import BLOCK_STEPS

    global ROUNDS, ROUND_STEPS, WARMUP_STEPS, DISTINCT_BATCHES
    if tiny:
        ROUNDS, ROUND_STEPS, WARMUP_STEPS, DISTINCT_BATCHES = 2, BLOCK_STEPS, 5, 2 * BLOCK_STEPS
    pinned = _pin_to_one_core()
    ms.set_device("CPU")
    ms.device_context.cpu.op_tuning.threads_num(1)  # as the CPU worker runs: one op thread
    results = [measure_policy(policy) for policy in POLICIES]
    realistic = realistic_section(tiny)
    met = all(r.overhead <= THRESHOLD for r in results)
    verdicts = []
    for r in results:
        p = r.parts_ms
        verdicts.append(
            f"- **{r.name}**: {r.ampsweep_ms:.2f} ms/step against {r.bare_ms:.2f} ms/step bare, "
            f"overhead **{_pct(r.overhead)}**. Of the extra time per step, global norm + clipping take "
            f"{p['clip']:+.2f} ms, "
            + (
                f"the rest of ampsweep's lean step (finite flag, scale, metric vector) {p['stats']:+.2f} ms, "
                f"and the block copies every {BLOCK_STEPS} steps plus the sampled per-parameter statistics "
                f"every {LAYER_EVERY}th step {p['copies']:+.2f} ms"
                if _lean_step()
                else f"the per-parameter statistics (norm, max |g|, non-finite count for each of the "
                f"{r.params} parameters, and the finite flag) {p['stats']:+.2f} ms, and the block copies "
                f"every {BLOCK_STEPS} steps {p['copies']:+.2f} ms"
            )
            + " (medians of paired differences)."
        )
    head = [
        "## Per-step capture cost (bench_capture)",
        "",
        '**Issue:** "Per-step capture costs at most 5 % of the step time of a bare training loop."',
        "",
        "**Verdict: "
        + (
            "met** — ampsweep's step is within 5 % of the bare loop for every policy."
            if met
            else "not met** — on this workload ampsweep's step costs "
            + " and ".join(_pct(r.overhead) for r in results)
            + " over a bare loop, against a budget of +5 %."
        ),
        "",
        *verdicts,
        "",
        where_the_time_goes(results),
        "",
        f"Setup: `{WORKLOAD}` with its defaults (hidden 192, batch 6, Adam), clipping off (ampsweep "
        "still computes the norm and multiplies by the factor 1), CPU backend with "
        f"`threads_num(1)`, process {pinned} as a CPU worker is, batches converted to Tensors before "
        "timing. The baseline returns the loss as a 1-element tensor: returned as a 0-d tensor the "
        "same step takes "
        + " and ".join(f"{r.scalar_slowdown:.1f}×" for r in results)
        + " as long on MindSpore's CPU backend (row 2 of each table; the Python thread spins while the "
        "runtime hands the scalar over), and against that loop the capture would have looked "
        + ("free." if all(r.ampsweep_ms < r.bare_ms * r.scalar_slowdown for r in results) else "cheaper."),
        "",
    ]
    if tiny:
        head.insert(2, "_Tiny smoke-test size: the figures mean nothing._\n")
    return "\n".join(head + [r.table + "\n" for r in results] + [realistic])


# --- a model of realistic shape ------------------------------------------------------------------

REALISTIC = "ampsweep.jobs.workloads.mindcv:make"
REALISTIC_ARGS = {"model": "resnet18", "batch": 8, "image": 32}
REALISTIC_TINY_ARGS = {"model": "resnet18", "batch": 2, "image": 16}
REALISTIC_ROUNDS = 3
REALISTIC_ROUND_STEPS = 4
REALISTIC_KEYS = ("bare", "clip", "ampsweep")


def realistic_section(tiny: bool) -> str:
    """The same loops on mindcv's resnet18 (O2 and FP32): bare, bare + clipping, ampsweep's step."""
    import importlib.util

    if importlib.util.find_spec("mindcv") is None:
        return (
            "### Realistic model: mindcv resnet18\n\nSkipped: mindcv is not installed "
            "(`pip install -e '.[models]'`, mindcv==0.3.0).\n"
        )
    args = REALISTIC_TINY_ARGS if tiny else REALISTIC_ARGS
    rounds, steps = (1, 2) if tiny else (REALISTIC_ROUNDS, REALISTIC_ROUND_STEPS)
    policies = POLICIES[:1] if tiny else POLICIES
    rows = []
    verdicts = []
    for level, black_list, dtype in policies:
        black_list = ()  # resnet18's BatchNorm is on O2's default black list; nothing hand-written
        config = _config(level, black_list, dtype, REALISTIC, args)
        name = _policy_name(level, black_list, dtype)
        _log(f"resnet18 {name}: compiling 3 loops, then {rounds} rounds x {steps} steps each")
        variants, compile_s, params = measure(
            config, rounds=rounds, round_steps=steps, warmup=1, distinct=steps + 1, keys=REALISTIC_KEYS
        )
        by = {v.key: v for v in variants}
        over_bare = _ratios(by["ampsweep"].ms, by["bare"].ms)
        over_clip = _ratios(by["ampsweep"].ms, by["clip"].ms)
        rows.append(
            f"| {name} | {statistics.median(by['bare'].ms):.0f} | {statistics.median(by['clip'].ms):.0f} | "
            f"{statistics.median(by['ampsweep'].ms):.0f} | {_range(over_bare)} | {_range(over_clip)} | "
            f"{params} | {compile_s:.0f} |"
        )
        verdicts.append((name, statistics.median(over_bare), statistics.median(over_clip)))
    met = all(c <= THRESHOLD for _, _, c in verdicts)
    lines = [
        "### Realistic model: mindcv resnet18",
        "",
        f"`{REALISTIC}` with {args} (mindcv 0.3.0, `pretrained=False`, synthetic images, momentum SGD), "
        "the same loops as above built the same way; clipping off (ampsweep still computes the norm and "
        f"the factor). {rounds} rounds × {steps} steps per loop, interleaved, order reversed every round, "
        "after one warm-up step; overhead is the ratio within a round, median (min … max). Policies: "
        "resnet18 has no hand-written normalization, so O2 runs with the default black list (its "
        "BatchNorm stays FP32).",
        "",
        "| policy | bare ms/step | bare + clipping ms/step | ampsweep ms/step | ampsweep vs bare | "
        "ampsweep vs bare + clipping | parameter tensors | compile + warm-up of 3 loops, s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "**Target** (issue 12, for the lean step): capture ≤ 5 % over the user's own loop with the same "
        "clipping — "
        + ("**met** on this model: " if met else "**missed** on this model: ")
        + "; ".join(f"{n} {_pct(c)}" for n, _, c in verdicts)
        + " (median over rounds).",
        "",
    ]
    if not met:
        lines += [
            "Missed. This table does not split the overhead into parts; the seed_repro tables above do "
            "(global norm + clipping, the rest of ampsweep's step, block copies). "
            + (
                "The step measured is the lean one (per-parameter statistics every "
                f"{LAYER_EVERY}th step only)."
                if _lean_step()
                else "The step measured still computes the per-parameter statistics on every step."
            ),
            "",
        ]
    return "\n".join(lines)
