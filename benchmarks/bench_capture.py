"""Issue: "Per-step capture costs at most 5 % of the step time of a bare training loop".

ampsweep's step (``jobs._trainer.CompiledStep``) computes, inside the jitted
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

WORKLOAD = "jobs.workloads.seed_repro:make"
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
_EPS = 1e-6


def _log(message: str) -> None:
    print(f"[bench_capture] {message}", file=sys.stderr, flush=True)


def _config(level: str, black_list: tuple[str, ...], dtype: str) -> Any:
    from jobs import TrialConfig

    return TrialConfig(
        workload=WORKLOAD,
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

    from jobs import build_workload

    ms.set_seed(config.seed)
    np.random.seed(config.seed)
    return build_workload(config.workload, config.seed, config.workload_args)


def _batches(config: Any) -> list[tuple[Any, ...]]:
    from jobs._batches import to_tensors

    stream = iter(_fresh_workload(config).batches)
    return [to_tensors(next(stream)) for _ in range(DISTINCT_BATCHES)]


def _bare_parts(config: Any) -> tuple[Any, Any]:
    """The user's own loop: loss cell cast for the policy, value_and_grad, optimizer."""
    import mindspore as ms

    from jobs._amp import apply_amp, known_layer_types, resolve_black_list
    from jobs._loss_cell import NetworkWithLoss

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
    """What ``jobs._trainer._train`` does per step: keep outputs, stack and copy each block."""
    from mindspore import ops

    from jobs._trainer import BLOCK_STEPS

    pending: list[Any] = []
    block = None
    for batch in batches:
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


def _variants(config: Any) -> tuple[list[Variant], int]:
    from jobs._trainer import BLOCK_STEPS, CompiledStep

    bare = make_bare_step(config)
    bare_scalar = make_bare_step(config, scalar_loss=True)
    clip_only = make_clip_only_step(config)
    full = CompiledStep(config, _fresh_workload(config))
    full_nocopy = CompiledStep(config, _fresh_workload(config))
    off = full.clip_tensor(None)
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
    return variants, len(full.layer_names)


def measure(config: Any) -> tuple[list[Variant], float, int]:
    """Compile and warm every loop, then time them in interleaved rounds."""
    batches = _batches(config)
    started = time.perf_counter()
    variants, params = _variants(config)
    for variant in variants:  # first call compiles; the rest warms caches and allocators
        variant.run(batches[:WARMUP_STEPS])
    compile_s = time.perf_counter() - started
    cycled = batches + batches
    for round_index in range(ROUNDS):
        first = (round_index * ROUND_STEPS) % DISTINCT_BATCHES
        chunk = cycled[first : first + ROUND_STEPS]
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


def run() -> str:
    """Measure every policy and return the Markdown section."""
    import mindspore as ms

    from jobs._trainer import BLOCK_STEPS

    pinned = _pin_to_one_core()
    ms.set_device("CPU")
    ms.device_context.cpu.op_tuning.threads_num(1)  # as the CPU worker runs: one op thread
    results = [measure_policy(policy) for policy in POLICIES]
    met = all(r.overhead <= THRESHOLD for r in results)
    verdicts = []
    for r in results:
        p = r.parts_ms
        verdicts.append(
            f"- **{r.name}**: {r.ampsweep_ms:.2f} ms/step against {r.bare_ms:.2f} ms/step bare, "
            f"overhead **{_pct(r.overhead)}**. Of the extra time per step, global norm + clipping take "
            f"{p['clip']:+.2f} ms, the per-parameter statistics (norm, max |g|, non-finite count for each "
            f"of the {r.params} parameters, and the finite flag) {p['stats']:+.2f} ms, and the block "
            f"copies every {BLOCK_STEPS} steps {p['copies']:+.2f} ms (medians of paired differences)."
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
    return "\n".join(head + [r.table + "\n" for r in results])
