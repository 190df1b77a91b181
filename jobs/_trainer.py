"""One trial: real MindSpore training of a workload under one AMP policy.

Everything that happens per step is inside a ``mindspore.jit`` graph: the
forward and backward pass, unscaling, the global norm, clipping and the update.
Each graph comes in two compiled variants over the same parameters, optimizer
and loss scaler (see ``CompiledStep``): the *lean* one, which every ordinary
step runs, returns only what the ``steps`` table needs; the *sampled* one,
which runs on every ``layer_every``-th step, adds the per-parameter gradient
statistics of the ``layers`` table. Both compute the update with the same
operations, so which one ran a step never changes the trajectory. Per-step
vectors are stacked and copied to the host in blocks, so the host sees no
per-element traffic and divergence is still caught within one block.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampsweep_contracts import final_loss, first_nonfinite_step, parse_loss_scale

from ._amp import apply_amp, known_layer_types, resolve_black_list
from ._batches import batch_stream
from ._capture import layers_table, steps_table
from ._config import TrialConfig
from ._placement import Placement
from ._result import Outcome, TrialResult
from ._workload import Workload, build_workload

#: Steps whose metrics are copied to the host together.
BLOCK_STEPS = 25
#: Finite steps after which dynamic loss scaling doubles the scale again.
DYNAMIC_SCALE_WINDOW = 50
_EPS = 1e-6
_NO_CLIP = float(np.finfo(np.float32).max)
# Layout of the per-step metric vector (both variants): 4 scalars.
_LOSS, _NORM, _FINITE, _SCALE = 0, 1, 2, 3
# The sampled variant's second output: norm, max |g| and non-finite count, each per parameter.
_LEAN, _SAMPLED = "lean", "sampled"


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


def _make_scaler(loss_scale: str) -> Any:
    from mindspore import amp

    scale = parse_loss_scale(loss_scale)
    if scale.kind == "none":
        return None
    if scale.kind == "static":
        return amp.StaticLossScaler(scale.initial)
    # a window of 50 finite steps before doubling again (MindSpore's Model uses
    # 2000) lets a few-hundred-step trial show the scale recover, not only fall
    return amp.DynamicLossScaler(scale.initial, 2, DYNAMIC_SCALE_WINDOW)


def _check_device_support(config: TrialConfig, device_target: str) -> None:
    if config.dtype == "bfloat16" and config.amp_level != "O0" and device_target == "CPU":
        raise UnsupportedCombination(
            "bfloat16 is not supported by MindSpore's CPU backend; run this trial on Ascend or GPU."
        )


def _training_state(loss_cell: Any, optimizer: Any, scaler: Any) -> dict[tuple[str, str], Any]:
    """Every Parameter a trial starts from: weights, optimizer state, loss-scaler state.

    Keys carry their owner so an optimizer slot can never be confused with a
    network parameter of the same name; parameters the optimizer merely
    references (the network's own) are listed once, under the network.
    """
    state: dict[tuple[str, str], Any] = {}
    seen: set[int] = set()
    owners = [("net", loss_cell), ("opt", optimizer)]
    for owner, cell in owners:
        for _, param in cell.parameters_and_names():
            if id(param) not in seen:
                seen.add(id(param))
                state[(owner, param.name)] = param
    if scaler is not None:
        for name, value in vars(scaler).items():
            if type(value).__name__ == "Parameter":
                state[("scaler", name)] = value
    return state


class CompiledStep:
    """A network cast for one policy with its compiled training step, in two variants.

    * ``step(clip, batch)`` -- the *lean* variant, for ordinary steps: loss,
      pre-clip global norm, finite flag and loss scale as one 4-element vector,
      plus the clip and the update. Nothing per parameter leaves the graph.
    * ``step.sampled(clip, batch)`` -- the *sampled* variant, for the steps that
      reach the ``layers`` table: the same vector and the same update, plus a
      ``3 × params`` vector (per-parameter L2 norm, max |g|, non-finite count).

    Both variants are built from one Python function, so they share the
    parameters, the optimizer and the loss scaler, and compute loss, norm,
    finite flag, clip factor and update with identical operations; the
    statistics only read the gradients. A step's result is bit-identical
    whichever variant ran it. Each variant compiles on its first call, so a
    graph costs at most two compiles per worker; ``compiled`` says which have.

    One instance serves every trial of its graph: ``reset`` loads a trial's
    starting state into the compiled graphs instead of rebuilding them.
    """

    def __init__(self, config: TrialConfig, workload: Workload) -> None:
        import mindspore as ms
        from mindspore import ops
        from mindspore.common import dtype as mstype

        from ._loss_cell import NetworkWithLoss

        known = known_layer_types([workload.network, workload.loss_fn])
        black_list = resolve_black_list(config.black_list, known)
        loss_cell = apply_amp(
            NetworkWithLoss(workload.network, workload.loss_fn),
            config.amp_level,
            black_list,
            config.dtype,
        )
        optimizer = workload.optimizer(workload.network.trainable_params())
        params = optimizer.parameters
        self.layer_names = [p.name for p in params]
        scaler = _make_scaler(config.loss_scale)
        self._state = _training_state(loss_cell, optimizer, scaler)
        self._reset_graph: Any = None
        #: the variants that have compiled (run at least once) in this process
        self.compiled: set[str] = set()
        skips_nonfinite = scaler is not None
        one = ms.Tensor(1.0, mstype.float32)
        n_params = len(params)
        segments = ms.Tensor(
            np.repeat(np.arange(n_params), [int(np.prod(p.shape)) for p in params]).astype(np.int32)
        )

        def forward(*batch: Any) -> Any:
            loss = loss_cell(*batch)
            return scaler.scale(loss) if skips_nonfinite else loss

        grad_fn = ms.value_and_grad(forward, None, params)

        # The two variants share ``gradients`` and ``update`` (inlined into each
        # graph), so loss, norm, clip factor and update are the same operations.
        def gradients(clip: Any, *batch: Any) -> Any:
            loss, grads = grad_fn(*batch)
            if skips_nonfinite:
                scale = scaler.scale_value.astype(mstype.float32)
                loss = scaler.unscale(loss)
                grads = scaler.unscale(grads)
            else:
                scale = one
            # Per parameter, the sum of squares as a sequential float32 sum: the last
            # element of a cumsum, bit for bit what ``unsorted_segment_sum`` over one
            # flat vector gave (the layout before the lean step, whose numbers the
            # tables keep), at a fraction of its cost on MindSpore's CPU backend.
            squares = ops.stack(
                [ops.cumsum(ops.square(g.astype(mstype.float32).reshape(-1)), 0)[-1] for g in grads]
            )
            norm = ops.sqrt(ops.reduce_sum(squares))
            # finite: no gradient element is inf/NaN (either makes the sum of squares
            # inf/NaN). The one difference to counting non-finite elements: finite
            # gradients whose squares overflow float32 (|g| > ~1.8e19) count as
            # non-finite; their clip factor would have been 0 anyway.
            finite = ops.isfinite(norm)
            return loss, grads, scale, squares, norm, finite

        def update(clip: Any, loss: Any, grads: Any, scale: Any, norm: Any, finite: Any) -> Any:
            # clipped exactly when norm > clip, which is what the steps table records
            factor = ops.select(norm > clip, clip / (norm + _EPS), one)
            clipped_grads = tuple(g * factor.astype(g.dtype) for g in grads)
            if skips_nonfinite:
                if finite:
                    loss = ops.depend(loss, optimizer(clipped_grads))
                loss = ops.depend(loss, scaler.adjust(finite))
            else:
                loss = ops.depend(loss, optimizer(clipped_grads))
            return ops.stack([loss.astype(mstype.float32), norm, finite.astype(mstype.float32), scale])

        def lean_step(clip: Any, *batch: Any) -> Any:
            loss, grads, scale, _, norm, finite = gradients(clip, *batch)
            return update(clip, loss, grads, scale, norm, finite)

        def sampled_step(clip: Any, *batch: Any) -> Any:
            loss, grads, scale, squares, norm, finite = gradients(clip, *batch)
            head = update(clip, loss, grads, scale, norm, finite)
            # the per-parameter statistics read the gradients and write nothing back
            flat = ops.concat([g.astype(mstype.float32).reshape(-1) for g in grads])
            absmax = ops.unsorted_segment_max(ops.abs(flat), segments, n_params)
            bad = ops.unsorted_segment_sum(
                ops.logical_not(ops.isfinite(flat)).astype(mstype.float32), segments, n_params
            )
            return head, ops.concat([ops.sqrt(squares), absmax, bad])

        self._lean = ms.jit(lean_step)
        self._sampled = ms.jit(sampled_step)
        self._tensor = ms.Tensor
        self._float32 = mstype.float32

    def reset(self, config: TrialConfig, fresh: Workload) -> None:
        """Load the state a fresh process would start this trial from.

        Values come from a freshly built workload (the factory's own
        initialisation for this seed, a new optimizer, a new loss scaler) and
        are assigned *inside* a compiled function: assigning from Python does
        not reach a graph that is already compiled.
        """
        import mindspore as ms
        from mindspore import ops

        from ._loss_cell import NetworkWithLoss

        source_optimizer = fresh.optimizer(fresh.network.trainable_params())
        source = _training_state(
            NetworkWithLoss(fresh.network, fresh.loss_fn), source_optimizer, _make_scaler(config.loss_scale)
        )
        if source.keys() != self._state.keys():
            missing = sorted(set(self._state) ^ set(source))[:3]
            raise RuntimeError(f"the workload built a different set of parameters this time: {missing}")
        keys = list(self._state)
        values = tuple(
            ms.Tensor(source[key].asnumpy().astype(self._state[key].asnumpy().dtype)) for key in keys
        )
        if self._reset_graph is None:
            targets = [self._state[key] for key in keys]

            def assign_all(*new_values: Any) -> Any:
                done = new_values[0]
                for target, value in zip(targets, new_values):
                    done = ops.depend(done, ops.assign(target, value))
                return done

            self._reset_graph = ms.jit(assign_all)
        self._reset_graph(*values)

    def clip_tensor(self, clip: float | None) -> Any:
        return self._tensor(_NO_CLIP if clip is None else clip, self._float32)

    def __call__(self, clip: Any, batch: tuple[Any, ...]) -> Any:
        """One ordinary step (lean variant): the 4-element metric vector."""
        self.compiled.add(_LEAN)
        return self._lean(clip, *batch)

    def sampled(self, clip: Any, batch: tuple[Any, ...]) -> tuple[Any, Any]:
        """One step that reaches ``layers``: the same vector, and the per-parameter statistics."""
        self.compiled.add(_SAMPLED)
        return self._sampled(clip, *batch)


def _first_abort(finite_loss: np.ndarray, abort_after: int) -> int | None:
    """Index of the step at which ``abort_after`` consecutive non-finite losses end."""
    run = 0
    for i, ok in enumerate(finite_loss):
        run = 0 if ok else run + 1
        if run >= abort_after:
            return i
    return None


def _train(
    config: TrialConfig, workload: Workload, step: CompiledStep
) -> tuple[TrialMetrics, float, int | None]:
    """Run the trial's steps; returns its metrics, the compile time it paid, and where it aborted.

    Step ``i`` runs the sampled variant when ``i % layer_every == 0`` (so step 0
    always does) and the lean variant otherwise. A variant's first call in this
    process compiles it: that call is timed on its own, synchronously, and its
    excess over a typical step is the compile time. The per-parameter
    statistics stay on the device until the trial ends and are copied once.
    """
    from mindspore import ops

    clip = step.clip_tensor(config.clip)
    every = max(1, config.layer_every)
    batches = batch_stream(workload.batches, config.steps)
    rows: list[np.ndarray] = []
    step_ms: list[float] = []
    first_calls: list[tuple[int, float]] = []  # (step, seconds) of each compiling call
    sampled_at: list[int] = []
    sampled_stats: list[Any] = []
    abort_at: int | None = None
    pending: list[Any] = []

    def flush() -> None:
        nonlocal pending, block_start
        if pending:
            block = ops.stack(pending).asnumpy()
            elapsed = (time.perf_counter() - block_start) * 1000.0
            step_ms.extend([elapsed / len(pending)] * len(pending))
            rows.append(block)
            pending = []
        block_start = time.perf_counter()

    block_start = time.perf_counter()
    for index, batch in enumerate(batches):
        variant = _SAMPLED if index % every == 0 else _LEAN
        compiles = variant not in step.compiled
        if compiles:
            flush()  # time the compiling call alone
        if variant == _SAMPLED:
            head, stats = step.sampled(clip, batch)
            sampled_at.append(index)
            sampled_stats.append(stats)
        else:
            head = step(clip, batch)
        if compiles:
            rows.append(head.asnumpy()[None, :])
            seconds = time.perf_counter() - block_start
            first_calls.append((index, seconds))
            step_ms.append(seconds * 1000.0)
            block_start = time.perf_counter()
            continue
        pending.append(head)
        if len(pending) == BLOCK_STEPS or index == config.steps - 1:
            flush()
            losses = np.concatenate([r[:, _LOSS] for r in rows])
            abort_at = _first_abort(np.isfinite(losses), config.abort_after)
            if abort_at is not None:
                break
    flush()
    table = np.concatenate(rows)
    n = table.shape[0] if abort_at is None else abort_at + 1
    table = table[:n]
    ms_per_step = np.asarray(step_ms[:n])
    compile_s = _compile_seconds(first_calls, ms_per_step, n)
    params = len(step.layer_names)
    kept = [i for i, at in enumerate(sampled_at) if at < n]
    stats = (
        ops.stack([sampled_stats[i] for i in kept]).asnumpy()
        if kept
        else np.zeros((0, 3 * params), np.float32)
    )
    metrics = TrialMetrics(
        loss=table[:, _LOSS].astype(np.float64),
        grad_norm=table[:, _NORM].astype(np.float64),
        finite=table[:, _FINITE] > 0.5,
        scale=table[:, _SCALE].astype(np.float64),
        step_ms=ms_per_step,
        layer_names=step.layer_names,
        layer_steps=np.asarray([sampled_at[i] for i in kept], dtype=np.int64),
        layer_norm=stats[:, :params],
        layer_absmax=stats[:, params : 2 * params],
        layer_nonfinite=stats[:, 2 * params : 3 * params],
    )
    return metrics, compile_s, abort_at


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


class GraphCache:
    """Compiled steps kept by one worker process, one per graph id.

    Trials that differ only in clip threshold, seed or static scale value
    share a graph; a worker compiles each graph once and resets it per trial.
    """

    def __init__(self) -> None:
        self._steps: dict[tuple[str, str], CompiledStep] = {}

    def step_for(
        self, config: TrialConfig, workload_ref: str, workload: Workload
    ) -> tuple[CompiledStep, bool]:
        """The compiled step for this trial, and whether it was reused."""
        key = (workload_ref, config.graph_id)
        step = self._steps.get(key)
        if step is not None:
            step.reset(config, workload)
            return step, True
        step = CompiledStep(config, workload)
        self._steps[key] = step
        return step, False

    def forget(self, config: TrialConfig, workload_ref: str) -> None:
        self._steps.pop((workload_ref, config.graph_id), None)


def run_trial(
    config: TrialConfig,
    workload_ref: str,
    placement: Placement | None = None,
    cache: GraphCache | None = None,
) -> TrialResult:
    """Run one trial to a result; an exception becomes a ``failed`` result, never a crash."""
    placement = placement or local_placement()
    started = time.perf_counter()
    target_loss: float | None = None
    try:
        _check_device_support(config, placement.device_target)
        seed_everything(config.seed)
        workload = build_workload(workload_ref, config.seed, config.workload_args)
        target_loss = workload.target_loss
        if cache is None:
            step, reused = CompiledStep(config, workload), False
        else:
            step, reused = cache.step_for(config, workload_ref, workload)
        metrics, compile_s, abort_at = _train(config, workload, step)
        if reused:
            compile_s = 0.0
    except Exception as exc:  # a trial's failure must not stop the sweep
        if cache is not None:
            cache.forget(config, workload_ref)  # its state may be half-reset
        return TrialResult.failure(
            config,
            one_line(exc),
            placement,
            traceback=None if isinstance(exc, UnsupportedCombination) else traceback.format_exc(),
            wall_s=time.perf_counter() - started,
            target_loss=target_loss,
        )
    return TrialResult(
        config=config,
        outcome=Outcome.COMPLETED if abort_at is None else Outcome.DIVERGED,
        placement=placement,
        steps_run=len(metrics.loss),
        first_nonfinite_step=first_nonfinite_step(metrics.loss),
        final_loss=final_loss(metrics.loss),
        target_loss=None if target_loss is None else float(target_loss),
        compile_s=compile_s,
        wall_s=time.perf_counter() - started,
        steps=steps_table(config, metrics),
        layers=layers_table(config, metrics),
    )


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` — what the ``error`` column holds."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def local_placement() -> Placement:
    """Where a trial runs when called outside an actor (tests, benchmarks): this process's CPU."""
    return Placement(device_kind="cpu", device_target="CPU", mindspore_version=mindspore_version())


def mindspore_version() -> str:
    """The installed MindSpore version, read without importing MindSpore."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mindspore")
    except PackageNotFoundError:
        return ""


__all__ = ["CompiledStep", "GraphCache", "TrialMetrics", "local_placement", "one_line", "run_trial"]
