"""The compiled training step of one graph, and the cache that reuses it across trials.

The lean step, its sampled statistics and the reuse of a graph across trials:
docs/internals.md (The compiled step and its reuse).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ampsweep.contracts import DYNAMIC_SCALE_WINDOW, FLOAT16_TINY, parse_loss_scale

from .._config import TrialConfig
from .._workload import Workload
from ._data_parallel import RankGroup, collectives
from ._starts import StartCache

_EPS = 1e-6
_NO_CLIP = float(np.finfo(np.float32).max)
# A sampled step's statistics, each per parameter: norm, max |g|, non-finite count,
# exact zeros, and nonzero values float16 cannot hold at the step's loss scale (< 2^-24).
SAMPLED_STATS = 5
#: Length of the per-step metric vector (loss, norm, finite, scale); a sampled step's vector begins with it.
HEAD = 4
#: Where each of the ``HEAD`` scalars sits in a step's vector.
HEAD_LOSS, HEAD_NORM, HEAD_FINITE, HEAD_SCALE = 0, 1, 2, 3
LEAN, SAMPLED = "lean", "sampled"
#: Key of one Parameter of the training state: (owner, name), owner one of net, opt, scaler.
StateKey = tuple[str, str]


def make_scaler(loss_scale: str) -> Any:
    from mindspore import amp

    scale = parse_loss_scale(loss_scale)
    if scale.kind == "none":
        return None
    if scale.kind == "static":
        return amp.StaticLossScaler(scale.initial)
    # a window of 50 finite steps before doubling again (MindSpore's Model uses
    # 2000) lets a few-hundred-step trial show the scale recover, not only fall
    return amp.DynamicLossScaler(scale.initial, 2, DYNAMIC_SCALE_WINDOW)


def training_state(loss_cell: Any, optimizer: Any, scaler: Any) -> dict[tuple[str, str], Any]:
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


def initial_state(config: TrialConfig, fresh: Workload) -> dict[StateKey, np.ndarray]:
    """The values a fresh process starts this trial from: the factory's network before any cast, a new
    optimizer over it and a new loss scaler, read from a freshly built workload."""
    from ._loss_cell import NetworkWithLoss

    source_optimizer = fresh.optimizer(fresh.network.trainable_params())
    source = training_state(
        NetworkWithLoss(fresh.network, fresh.loss_fn), source_optimizer, make_scaler(config.loss_scale)
    )
    return {key: param.asnumpy() for key, param in source.items()}


def scaler_state(loss_scale: str) -> dict[StateKey, np.ndarray]:
    """A new loss scaler's values: the part of a trial's start that depends on its ``loss_scale``."""
    scaler = make_scaler(loss_scale)
    if scaler is None:
        return {}
    return {
        ("scaler", name): value.asnumpy()
        for name, value in vars(scaler).items()
        if type(value).__name__ == "Parameter"
    }


@functools.cache
def _gradient_buffers(total: int, n_params: int) -> tuple[Any, Any]:
    """The device buffers a step leaves its gradients in: flat float32, and per-parameter sums of squares.

    One pair per process and model size, shared by every graph: a worker runs
    one step at a time and reads a sampled step's statistics before the next
    step, so the graphs it holds cost one float32 copy of the gradients in all.
    """
    import mindspore as ms
    from mindspore import ops
    from mindspore.common import dtype as mstype

    grads = ms.Parameter(ops.zeros((total,), mstype.float32), name="ampsweep_grads", requires_grad=False)
    squares = ms.Parameter(
        ops.zeros((n_params,), mstype.float32), name="ampsweep_grad_squares", requires_grad=False
    )
    return grads, squares


@functools.cache
def _statistics_graph() -> Any:
    """The compiled per-parameter statistics of a sampled step, shared by every graph of the process.

    It reads the gradients the lean step left behind (flat, float32) and their
    per-parameter sums of squares, and writes nothing. Its inputs are
    arguments, not captured Parameters, so graphs whose models have the same
    parameter sizes (every graph of one workload) reuse one compile.
    """
    import mindspore as ms
    from mindspore import ops
    from mindspore.common import dtype as mstype

    def statistics(head: Any, flat: Any, squares: Any, segments: Any) -> Any:
        n_params = squares.shape[0]
        magnitude = ops.abs(flat)
        absmax = ops.unsorted_segment_max(magnitude, segments, n_params)
        bad = ops.unsorted_segment_sum(
            ops.logical_not(ops.isfinite(flat)).astype(mstype.float32), segments, n_params
        )
        zero = magnitude == 0.0
        zeros = ops.unsorted_segment_sum(zero.astype(mstype.float32), segments, n_params)
        # what the float16 backward saw is the scaled gradient: below 2^-24 it flushes to zero
        tiny = ops.logical_and(magnitude * head[HEAD - 1] < FLOAT16_TINY, ops.logical_not(zero))
        below = ops.unsorted_segment_sum(tiny.astype(mstype.float32), segments, n_params)
        # one output tensor (HEAD scalars, then the statistics): see ``CompiledStep``
        return ops.concat([head, ops.sqrt(squares), absmax, bad, zeros, below])

    return ms.jit(statistics)


class CompiledStep:
    """A network cast for one policy with its compiled training step.

    * ``step(clip, batch)`` -- an ordinary step: loss, pre-clip global norm,
      finite flag and loss scale as one 4-element vector, plus the clip and
      the update. Nothing per parameter leaves the graph; the step copies its
      unscaled gradients (flat, float32) and their per-parameter sums of
      squares into two device buffers.
    * ``step.sampled(clip, batch)`` -- a step that reaches the ``layers``
      table: the same compiled step, then ``_statistics_graph`` over the
      buffers: a ``SAMPLED_STATS × params`` vector (per-parameter L2 norm,
      max |g|, non-finite count, zeros, values below 2^-24). It returns both
      as one vector (``sampled_vector``): on MindSpore 2.10 a ``jit`` function
      with a tuple output costs ~7 ms more per call than one with a single
      tensor on the CPU backend, about three steps of seed_repro.

    The buffers cost a few percent of a step; a second compiled variant of
    the whole step instead doubled each graph's compile (seed_repro, one CPU
    core: 2.8 s against 1.6 s). ``compiled`` says which kinds of step have run.
    One instance serves every trial of its graph (``load``).
    """

    def __init__(self, config: TrialConfig, workload: Workload, group: RankGroup | None = None) -> None:
        import mindspore as ms
        from mindspore import ops
        from mindspore.common import dtype as mstype

        from ._loss_cell import cast_for_trial

        #: what the black list keeps in FP32: every trial of this graph reports it (``TrialResult``)
        loss_cell, self.fp32_part = cast_for_trial(workload.network, workload.loss_fn, config)
        optimizer = workload.optimizer(workload.network.trainable_params())
        params = optimizer.parameters
        self.layer_names = [p.name for p in params]
        self.layer_sizes = np.asarray([int(np.prod(p.shape)) for p in params], dtype=np.int64)
        scaler = make_scaler(config.loss_scale)
        self._state = training_state(loss_cell, optimizer, scaler)
        self._dtypes: dict[StateKey, np.dtype] | None = None  # of each state Parameter, read once
        #: True on the CPU backend: outputs already live in host memory, so copying each
        #: step's vector on its own is cheaper than a ``stack`` op (see ``jobs.training._trainer``)
        self.on_host = ms.get_context("device_target") == "CPU"
        #: the kinds of step (LEAN, SAMPLED) that have run, so compiled, in this process
        self.compiled: set[str] = set()
        skips_nonfinite = scaler is not None
        one = ms.Tensor(1.0, mstype.float32)
        n_params = len(params)
        segments = ms.Tensor(
            np.repeat(np.arange(n_params), [int(np.prod(p.shape)) for p in params]).astype(np.int32)
        )

        # a rank of a data-parallel group averages gradients and losses across the ranks; a
        # single device traces none of it (the branches below fold away), so its graph is unchanged
        data_parallel = group is not None
        reduce_gradients: Any = None
        all_reduce: Any = None
        world: Any = None
        if group is not None:
            reduce_gradients, all_reduce = collectives(params, group)
            world = ms.Tensor(float(group.size), mstype.float32)

        def forward(*batch: Any) -> Any:
            loss = loss_cell(*batch)
            return scaler.scale(loss) if skips_nonfinite else loss

        grad_fn = ms.value_and_grad(forward, None, params)

        # The step in two halves; between them it keeps the gradients for the statistics.
        def gradients(clip: Any, *batch: Any) -> Any:
            loss, grads = grad_fn(*batch)
            if data_parallel:
                # averaged before the unscale and the clip, as MindSpore's loss-scale cell does:
                # the norm the clip reads is the averaged gradients' norm
                grads = reduce_gradients(grads)
            if skips_nonfinite:
                scale = scaler.scale_value.astype(mstype.float32)
                loss = scaler.unscale(loss)
                grads = scaler.unscale(grads)
            else:
                scale = one
            if data_parallel:
                loss = all_reduce(loss.astype(mstype.float32)) / world
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

        # One flat buffer: an assign per parameter cost seed_repro ~7 % of a step.
        grad_buffer, squares_buffer = _gradient_buffers(int(sum(self.layer_sizes)), n_params)

        def lean_step(clip: Any, *batch: Any) -> Any:
            loss, grads, scale, squares, norm, finite = gradients(clip, *batch)
            flat = ops.concat([g.astype(mstype.float32).reshape(-1) for g in grads])
            loss = ops.depend(loss, ops.assign(grad_buffer, flat))
            loss = ops.depend(loss, ops.assign(squares_buffer, squares))
            return update(clip, loss, grads, scale, norm, finite)

        self._grad_buffer = grad_buffer
        self._squares_buffer = squares_buffer
        self._segments = segments
        self._lean = ms.jit(lean_step)
        self._tensor = ms.Tensor
        self._float32 = mstype.float32

    def reset(self, config: TrialConfig, fresh: Workload) -> None:
        """Load the state a fresh process would start this trial from, read from a freshly built workload."""
        self.load(initial_state(config, fresh))

    def load(self, source: dict[StateKey, np.ndarray]) -> None:
        """Load a trial's starting values (``initial_state``) into the compiled graphs, in place.

        ``set_data`` would not reach a compiled graph (docs/internals.md); an
        assignment graph compiled with ``jit`` costs each (worker, graph) a
        compile of 0.1-0.3 s on a CPU core for the eager ops' per-call time
        (1-2 ms for seed_repro's 34 tensors).
        """
        import mindspore as ms
        from mindspore import ops

        if source.keys() != self._state.keys():
            missing = sorted(set(self._state) ^ set(source))[:3]
            raise RuntimeError(f"the workload built a different set of parameters this time: {missing}")
        if self._dtypes is None:
            self._dtypes = {key: param.asnumpy().dtype for key, param in self._state.items()}
        for key, target in self._state.items():
            ops.assign(target, ms.Tensor(np.asarray(source[key]).astype(self._dtypes[key])))

    def copy_state_into(self, loss_cell: Any, optimizer: Any, scaler: Any) -> None:
        """Hand this graph's current training state to a PyNative copy of the same trial.

        A replay (``jobs.localization._replay``) runs the steps it need not look at with this,
        the trial's own already-compiled graph, then continues in PyNative from
        exactly the weights, optimizer slots and loss scale the graph reached.
        """
        import mindspore as ms
        from mindspore import ops

        target = training_state(loss_cell, optimizer, scaler)
        if target.keys() != self._state.keys():
            missing = sorted(set(self._state) ^ set(target))[:3]
            raise RuntimeError(f"the replay has a different set of parameters: {missing}")
        for key, source in self._state.items():
            # in place: after ``set_data`` a PyNative optimizer went on updating the Parameter's
            # old tensors (its step count and beta powers), so every replayed step after a
            # fast-forward was off (Adam's first step after it moved weights by ~1e-2 too much)
            ops.assign(target[key], ms.Tensor(source.asnumpy()))

    def named_state(self) -> dict[str, Any]:
        """Network, optimizer and loss-scaler state under a snapshot's names: what a snapshot saves."""
        from ._snapshot import snapshot_names

        return snapshot_names(self._state)

    def clip_tensor(self, clip: float | None) -> Any:
        return self._tensor(_NO_CLIP if clip is None else clip, self._float32)

    def __call__(self, clip: Any, batch: tuple[Any, ...]) -> Any:
        """One ordinary step: the 4-element metric vector."""
        self.compiled.add(LEAN)
        return self._lean(clip, *batch)

    def sampled_vector(self, clip: Any, batch: tuple[Any, ...]) -> Any:
        """One step that reaches ``layers``: the ``HEAD`` scalars, then the per-parameter statistics."""
        head = self(clip, batch)
        self.compiled.add(SAMPLED)
        return _statistics_graph()(
            head, self._grad_buffer.value(), self._squares_buffer.value(), self._segments
        )

    def sampled(self, clip: Any, batch: tuple[Any, ...]) -> tuple[Any, Any]:
        """``sampled_vector`` split: the same vector as an ordinary step, and the statistics."""
        vector = self.sampled_vector(clip, batch)
        return vector[:HEAD], vector[HEAD:]


class GraphCache:
    """Compiled steps kept by one worker process, one per graph id, and the seeds' starts (``StartCache``).

    Trials that differ only in clip threshold, seed or static scale value share a graph.
    """

    def __init__(self) -> None:
        self._steps: dict[tuple[str, str], CompiledStep] = {}
        self.starts = StartCache()
        #: PyNative replays of a few graphs, kept for the next diagnosis (``jobs.localization._replay``)
        self.replays: dict[tuple[str, str], Any] = {}

    def held(self, config: TrialConfig, workload_ref: str) -> CompiledStep | None:
        """This trial's graph if this process has built it (compiled or not), else None."""
        return self._steps.get((workload_ref, config.graph_id))

    def hold(self, config: TrialConfig, workload_ref: str, step: CompiledStep) -> None:
        self._steps[(workload_ref, config.graph_id)] = step

    def compiled_for(self, config: TrialConfig, workload_ref: str) -> CompiledStep | None:
        """This trial's graph if this process has already compiled its step, else None."""
        step = self._steps.get((workload_ref, config.graph_id))
        return step if step is not None and LEAN in step.compiled else None

    def forget(self, config: TrialConfig, workload_ref: str) -> None:
        self._steps.pop((workload_ref, config.graph_id), None)
        self.replays.pop((workload_ref, config.graph_id), None)
