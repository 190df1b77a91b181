"""One trial: real MindSpore training of a workload under one AMP policy.

The step, its lean and sampled forms and the blocks its metrics reach the host
in: docs/internals.md (The compiled step and its reuse). Once the losses go
non-finite, the next copy comes when the abort would be due (``_next_block``).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampsweep.amp import NotKeptInFloat32
from ampsweep.contracts import FP32_LEVEL, error_line, final_loss

from .._config import TrialConfig
from .._placement import Placement
from .._result import Outcome, TrialResult
from .._workload import Workload, build_workload
from . import _step as layout
from ._batches import batch_stream, is_dataset
from ._capture import layers_table, loss_ok, steps_table
from ._data_parallel import Progress, RankGroup, shard_stream
from ._snapshot import checkpoint_bytes, continue_scaler, starting_from
from ._starts import TrialStart, draw, start_key
from ._step import HEAD, LEAN, SAMPLED, SAMPLED_STATS, CompiledStep, GraphCache, initial_state, scaler_state

#: Steps whose metrics are copied to the host together.
BLOCK_STEPS = 25


class UnsupportedCombination(RuntimeError):
    """The device cannot run this policy; the message is the one-sentence reason."""


@dataclass
class TrialMetrics:
    """Per-step arrays for one trial, already trimmed to the steps that ran."""

    loss: np.ndarray
    grad_norm: np.ndarray
    finite: np.ndarray
    scale: np.ndarray
    step_ms: np.ndarray
    layer_names: list[str]
    layer_steps: np.ndarray  # the sampled steps that ran, ascending
    layer_norm: np.ndarray  # [len(layer_steps), params]
    layer_absmax: np.ndarray
    layer_nonfinite: np.ndarray
    layer_sizes: np.ndarray  # elements per parameter
    layer_zeros: np.ndarray  # [len(layer_steps), params] counts of exact zeros
    layer_tiny: np.ndarray  # ... of nonzero values below 2^-24 at the loss scale

    def gradient_fractions(self) -> tuple[float | None, float | None]:
        """The trial's ``zero_fraction`` and ``underflow_fraction`` over every sampled gradient value."""
        total = float(self.layer_sizes.sum()) * len(self.layer_steps)
        if total <= 0:
            return None, None
        zeros = float(self.layer_zeros.sum())
        return zeros / total, (zeros + float(self.layer_tiny.sum())) / total


def _check_group(config: TrialConfig, group: RankGroup | None) -> None:
    """A trial runs on as many devices as it asks for: a gang of its size, or one device."""
    size = group.size if group is not None else 1
    if config.devices != size:
        raise RuntimeError(f"the trial asks for {config.devices} devices; this worker is a group of {size}")


def _next_block(finite_loss: np.ndarray, abort_after: int) -> int:
    """Steps until the next copy to the host: a whole block, or only as many as an abort still needs.

    Once the last losses are non-finite, the trial aborts ``abort_after`` bad steps in unless one
    recovers: a whole block would train steps the tables cut (the demo's 24 diverged O2 trials train
    656 steps to keep 634, not 950; on one core 2.6 s, not 3.5 s).
    """
    trailing = (
        len(finite_loss) - 1 - int(np.flatnonzero(finite_loss)[-1]) if finite_loss.any() else len(finite_loss)
    )
    return BLOCK_STEPS if trailing == 0 else max(1, min(BLOCK_STEPS, abort_after - trailing))


def _first_abort(finite_loss: np.ndarray, abort_after: int) -> int | None:
    """Index of the step at which ``abort_after`` consecutive non-finite losses end."""
    run = 0
    for i, ok in enumerate(finite_loss):
        run = 0 if ok else run + 1
        if run >= abort_after:
            return i
    return None


def _to_host(step: CompiledStep, vectors: list[Any]) -> np.ndarray:
    """Step outputs as one ``[len(vectors), length]`` array; a sampled vector is cut to its ``HEAD``.

    On the CPU backend each output already sits in host memory: reading each
    (~7 µs) beats a ``stack`` op over the block (~2 ms per 25 steps on one
    core, 3 % of seed_repro's step time). Elsewhere one device op gathers
    the block and one copy brings it over. Either way the values are the
    outputs' own, bit for bit.
    """
    from mindspore import ops

    if step.on_host:
        return np.stack([vector.asnumpy()[:HEAD] for vector in vectors])
    return ops.stack([v if v.shape[0] == HEAD else v[:HEAD] for v in vectors]).asnumpy()


def _statistics(step: CompiledStep, vectors: list[Any]) -> np.ndarray:
    """The per-parameter statistics of the sampled steps' vectors, ``[len(vectors), SAMPLED_STATS × params]``."""
    from mindspore import ops

    if not vectors:
        return np.zeros((0, SAMPLED_STATS * len(step.layer_names)), np.float32)
    if step.on_host:
        return np.stack([vector.asnumpy()[HEAD:] for vector in vectors])
    return ops.stack(vectors).asnumpy()[:, HEAD:]


def _train(
    config: TrialConfig, batches: Iterable[tuple[Any, ...]], step: CompiledStep
) -> tuple[TrialMetrics, float, int | None]:
    """Run the trial's steps on ``batches``; returns its metrics, the compile time it paid, and where it aborted.

    Step ``i`` is sampled (its per-parameter statistics computed) when
    ``i % layer_every == 0`` (so step 0 always is). A kind of step's first call in this
    process compiles it: that call is timed on its own, synchronously, and its
    excess over a typical step is the compile time. The per-parameter
    statistics stay on the device until the trial ends and are copied once.
    """
    clip = step.clip_tensor(config.clip)
    every = max(1, config.layer_every)
    rows: list[np.ndarray] = []
    step_ms: list[float] = []
    first_calls: list[tuple[int, float]] = []  # (step, seconds) of each compiling call
    sampled_at: list[int] = []
    sampled_stats: list[Any] = []
    abort_at: int | None = None
    pending: list[Any] = []
    block = BLOCK_STEPS

    block_start = time.perf_counter()

    def flush() -> None:
        nonlocal pending, block_start
        if pending:
            block = _to_host(step, pending)
            elapsed = (time.perf_counter() - block_start) * 1000.0
            step_ms.extend([elapsed / len(pending)] * len(pending))
            rows.append(block)
            pending = []
        block_start = time.perf_counter()

    for index, batch in enumerate(batches):
        variant = SAMPLED if index % every == 0 else LEAN
        compiles = variant not in step.compiled
        if compiles:
            flush()  # time the compiling call alone
        head = trial_step(step, clip, batch, index, every)
        if variant == SAMPLED:
            sampled_at.append(index)
            sampled_stats.append(head)
        if compiles:
            rows.append(head.asnumpy()[None, :HEAD])
            seconds = time.perf_counter() - block_start
            first_calls.append((index, seconds))
            step_ms.append(seconds * 1000.0)
            block_start = time.perf_counter()
            continue
        pending.append(head)
        if len(pending) == block or index == config.steps - 1:
            flush()
            ok = loss_ok(config, np.concatenate([r[:, layout.HEAD_LOSS] for r in rows]))
            abort_at = _first_abort(ok, config.abort_after)
            if abort_at is not None:
                break
            block = _next_block(ok, config.abort_after)
    flush()
    table = np.concatenate(rows)
    n = table.shape[0] if abort_at is None else abort_at + 1
    table = table[:n]
    ms_per_step = np.asarray(step_ms[:n])
    compile_s = _compile_seconds(first_calls, ms_per_step, n)
    params = len(step.layer_names)
    kept = [i for i, at in enumerate(sampled_at) if at < n]
    stats = _statistics(step, [sampled_stats[i] for i in kept])
    metrics = TrialMetrics(
        loss=table[:, layout.HEAD_LOSS].astype(np.float64),
        grad_norm=table[:, layout.HEAD_NORM].astype(np.float64),
        finite=table[:, layout.HEAD_FINITE] > 0.5,
        scale=table[:, layout.HEAD_SCALE].astype(np.float64),
        step_ms=ms_per_step,
        layer_names=step.layer_names,
        layer_steps=np.asarray([sampled_at[i] for i in kept], dtype=np.int64),
        layer_norm=stats[:, :params],
        layer_absmax=stats[:, params : 2 * params],
        layer_nonfinite=stats[:, 2 * params : 3 * params],
        layer_sizes=step.layer_sizes,
        layer_zeros=stats[:, 3 * params : 4 * params],
        layer_tiny=stats[:, 4 * params : 5 * params],
    )
    return metrics, compile_s, abort_at


def trial_step(step: CompiledStep, clip: Any, batch: tuple[Any, ...], index: int, every: int) -> Any:
    """Step ``index`` of a trial as the trial runs it: sampled (the ``HEAD`` scalars, then the per-parameter
    statistics) every ``every`` steps, lean otherwise; an exact rerun must call the same graph."""
    return step.sampled_vector(clip, batch) if index % every == 0 else step(clip, batch)


def _compile_seconds(first_calls: list[tuple[int, float]], ms_per_step: np.ndarray, n: int) -> float:
    """Compile time paid by this trial: each compiling call's excess over a typical step.

    The typical step is the median of the steps that compiled nothing; a trial
    too short to have one counts the compiling calls whole.
    """
    calls = [(at, seconds) for at, seconds in first_calls if at < n]
    compiling = {at for at, _ in calls}
    ordinary = [ms_per_step[i] for i in range(n) if i not in compiling]
    typical_s = float(np.median(ordinary)) / 1000.0 if ordinary else 0.0
    return sum(max(0.0, seconds - typical_s) for _, seconds in calls)


def seed_everything(seed: int) -> None:
    import mindspore as ms

    ms.set_seed(seed)
    np.random.seed(seed)


def trial_workload(
    config: TrialConfig, workload_ref: str, start: Mapping[str, Any] | None = None
) -> Workload:
    """The workload as this trial starts it: seeded, built, and at its start step.

    A forked trial (``config.start_from``) loads ``start``, its snapshot's
    parameters (the caller decoded them: ``jobs.training._snapshot.Snapshots``);
    the factory positions its own data when it accepts ``start_step``, else
    ``skip_batches`` says how many the trainer skips. The trial and every
    replay of it (localization, its FP32 twin) start here.
    """
    seed_everything(config.seed)
    workload = build_workload(workload_ref, config.seed, config.workload_args, start_step=config.start_step)
    if config.start_from:
        if start is None:
            raise RuntimeError(f"the trial starts from snapshot {config.start_from}, which was not given")
        workload = starting_from(workload, start)
    return workload


def skip_batches(config: TrialConfig, workload: Workload) -> int:
    """Batches the trainer draws and drops before the trial's first step."""
    return config.start_step - workload.data_start


def begin_trial(
    config: TrialConfig,
    workload_ref: str,
    cache: GraphCache,
    snapshot: Mapping[str, Any] | None,
    group: RankGroup | None,
) -> tuple[CompiledStep, bool, Iterable[tuple[Any, ...]], float | None]:
    """The trial's graph with its starting state loaded, whether it was reused, its batches, its target loss.

    With the graph and the seed's start both held, nothing is built: the
    start's values go into the graph and its batches are the ones converted
    for an earlier trial. Otherwise the workload is built as a fresh process
    builds it; a new graph is cast from it, a held graph loads the values the
    seed starts from; the batches it yields are drawn now and the start kept
    for the trials after (``jobs.training._starts``).
    """
    key = start_key(config, workload_ref)
    start = cache.starts.get(key)
    step = cache.held(config, workload_ref)
    if step is not None and start is not None and start.state is not None and start.batches is not None:
        seed_everything(config.seed)  # what trial_workload does first
        step.load({**start.state, **scaler_state(config.loss_scale)})
        return step, True, start.batches, start.target_loss
    workload = trial_workload(config, workload_ref, snapshot)
    state = start.state if start is not None else None
    if step is None:
        step, reused = CompiledStep(config, workload, group), False
        cache.hold(config, workload_ref, step)
    else:
        if state is None:
            state = initial_state(config, workload)
            state = {name: value for name, value in state.items() if name[0] != "scaler"}  # per trial
        step.load({**state, **scaler_state(config.loss_scale)})
        reused = True
    kept = start.batches if start is not None else None
    if kept is not None:
        batches: Iterable[tuple[Any, ...]] = kept
    else:
        stream = batch_stream(workload.batches, config.steps, skip=skip_batches(config, workload))
        if group is not None:  # the workload yields the global batch: this rank trains on its part
            stream = shard_stream(stream, group)
        if is_dataset(workload.batches):  # its epochs reshuffle from state outside the factory
            return step, reused, stream, workload.target_loss
        kept, batches = draw(stream, cache.starts.budget)
    cache.starts.put(key, TrialStart(workload.target_loss, kept, state))
    return step, reused, batches, workload.target_loss


def run_trial(
    config: TrialConfig,
    workload_ref: str,
    placement: Placement | None = None,
    cache: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
    group: RankGroup | None = None,
) -> TrialResult:
    """Run one trial to a result; an exception becomes a ``failed`` result, never a crash.

    ``start``: the parameters of the snapshot a forked trial starts from
    (``config.start_from``), decoded by the caller. ``group``: this rank's
    place in a gang (its part of each global batch, and the reductions). A dynamic loss scaler
    continues from the state the snapshot carries (``continue_scaler``).
    """
    # outside an actor (tests, benchmarks): this process's CPU
    placement = placement or Placement(
        device_kind="cpu", device_target="CPU", mindspore_version=mindspore_version()
    )
    started = time.perf_counter()
    target_loss: float | None = None
    counted: _FirstBatchRows | None = None
    try:
        if config.dtype == "bfloat16" and config.amp_level != FP32_LEVEL and placement.device_target == "CPU":
            raise UnsupportedCombination(
                "bfloat16 is not supported by MindSpore's CPU backend; run this trial on Ascend or GPU."
            )
        _check_group(config, group)
        # without a worker's cache, one for this trial alone: it builds what a fresh process builds
        step, reused, batches, target_loss = begin_trial(
            config, workload_ref, cache or GraphCache(), start, group
        )
        continue_scaler(step.named_state(), start, config.loss_scale)
        batches = counted = _FirstBatchRows(
            batches, None if group is None else group.progress, config.start_step
        )
        metrics, compile_s, abort_at = _train(config, batches, step)
        if reused:
            compile_s = 0.0
        snapshot = checkpoint_bytes(step.named_state()) if config.save_snapshot and abort_at is None else None
    except Exception as exc:  # a trial's failure must not stop the sweep
        if cache is not None:
            cache.forget(config, workload_ref)  # its state may be half-reset
        if isinstance(exc, NotKeptInFloat32):  # never tried: not a failure of mixed precision
            return TrialResult.failure(
                config,
                str(exc),
                placement,
                wall_s=time.perf_counter() - started,
                target_loss=target_loss,
                outcome=Outcome.NOT_APPLICABLE,
            )
        return TrialResult.failure(
            config,
            _with_hint(config, exc),
            placement,
            traceback=None if isinstance(exc, UnsupportedCombination) else traceback.format_exc(),
            wall_s=time.perf_counter() - started,
            target_loss=target_loss,
            failed_step=None if counted is None or not counted.drawn else _global(config, counted.drawn - 1),
        )
    return TrialResult(
        config=config,
        outcome=Outcome.COMPLETED if abort_at is None else Outcome.DIVERGED,
        placement=placement,
        steps_run=len(metrics.loss),
        first_nonfinite_step=_global(config, _first_bad(loss_ok(config, metrics.loss))),
        final_loss=final_loss(metrics.loss),
        gradient_fractions=metrics.gradient_fractions(),
        target_loss=None if target_loss is None else float(target_loss),
        compile_s=compile_s,
        wall_s=time.perf_counter() - started,
        steps=steps_table(config, metrics),
        layers=layers_table(config, metrics),
        snapshot=snapshot,
        fp32_part=step.fp32_part,
        global_batch=None if counted.rows is None else counted.rows * config.devices,
    )


class _FirstBatchRows:
    """The trial's batches, passed through; ``rows`` is the first one's first axis (a rank's part on a
    gang: the global batch is ``rows`` times the devices), ``drawn`` how many were drawn (the step a
    failure happened in), told to a rank's ``progress`` as the global step it enters."""

    def __init__(
        self, batches: Iterable[tuple[Any, ...]], progress: Progress | None = None, start_step: int = 0
    ) -> None:
        self._batches = batches
        self._progress = progress
        self._start_step = start_step
        self.rows: int | None = None
        self.drawn = 0

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for batch in self._batches:
            if self.rows is None and batch and len(batch[0].shape):
                self.rows = int(batch[0].shape[0])
            if self._progress is not None:
                self._progress.reached(self._start_step + self.drawn)
            self.drawn += 1
            yield batch


def _first_bad(ok: np.ndarray) -> int | None:
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else None


def _global(config: TrialConfig, step: int | None) -> int | None:
    """A step counted from the trial's start, as the global step the tables record."""
    return None if step is None else config.start_step + step


def _with_hint(config: TrialConfig, exc: BaseException) -> str:
    """The error line, and what to do where the cause is a known limit of MindSpore's, not the user's code."""
    line = error_line(exc)
    if config.amp_level == "O1" and isinstance(exc, NameError):
        # O1's rewrite regenerates each Cell's source as a new module: the globals of the
        # user's module (a constant used in construct) are not there
        line += (
            " (O1 rewrites the network's code into rewritten_network/ without its module's globals: "
            "keep such values as Cell attributes)"
        )
    return line


def mindspore_version() -> str:
    """The installed MindSpore version, read without importing MindSpore."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mindspore")
    except PackageNotFoundError:
        return ""
