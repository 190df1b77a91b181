"""A trial rebuilt for a PyNative replay: the same weights, batches, policy and update.

``jobs.localization._localize`` replays broken trials with hooks on every Cell; this module
builds the replay exactly as ``run_trial`` builds a trial (seed, then the
factory, then ``apply_amp`` on ``NetworkWithLoss``, then the optimizer over the
cast network's parameters), so what the hooks see is the trial's own run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampsweep.contracts import FP32_LEVEL

from .._config import TrialConfig
from ..training._batches import batch_stream
from ..training._data_parallel import RankGroup, shard_stream
from ..training._snapshot import continue_scaler, snapshot_names
from ..training._starts import start_key
from ..training._step import CompiledStep, GraphCache, StateKey, make_scaler, scaler_state, training_state
from ..training._trainer import skip_batches, trial_workload
from ._hooks import CellProbe, Event
from ._inside import Inside

_EPS = 1e-6  # as in the compiled step's clipping factor
#: A trial's starting values without its loss scaler's (``jobs.training._starts.TrialStart.state``).
StartState = dict[StateKey, np.ndarray]
#: A compiled prefix only pays off past this many steps: compiling a small
#: network's step costs 1-7 s on CPU, a PyNative step 0.1-0.5 s.
JIT_PREFIX_MIN_STEPS = 30


@dataclass
class CellFinding:
    event: Event
    step: int
    note: list[str]
    rel_error: float | None = None
    fp32_max_abs: float | None = None
    forward: Event | None = None  # backward findings: the same Cell's forward report that step
    #: forward findings whose inputs were finite: what a replay of the Cell saw inside it
    inside: Inside | None = None
    #: forward findings: every Cell's forward report that step, in the order the Cells returned
    step_forward: tuple[Event, ...] = ()


class Replay:
    """One trial rebuilt for PyNative: network, optimizer, scaler, batches and probe.

    Built exactly as ``run_trial`` builds a trial (seed, then the factory, then
    ``apply_amp`` on ``NetworkWithLoss``, then the optimizer over the cast
    network's parameters), so the weights and batches are the trial's own.
    On a rank of a gang (``group``) its batches are that rank's part of the
    batches the workload yields, as the trial's were.
    """

    def __init__(
        self,
        config: TrialConfig,
        workload_ref: str,
        steps: int,
        start: Mapping[str, Any] | None = None,
        group: RankGroup | None = None,
    ) -> None:
        import mindspore as ms
        from mindspore.common import dtype as mstype

        from ..training._loss_cell import cast_for_trial

        self.group = group
        workload = trial_workload(
            config, workload_ref, start
        )  # a forked trial's replay starts at its snapshot
        self.loss_cell, _ = cast_for_trial(workload.network, workload.loss_fn, config)
        self.network = workload.network
        self.optimizer = workload.optimizer(workload.network.trainable_params())
        self.params = self.optimizer.parameters
        self.scaler = make_scaler(config.loss_scale)
        self.dynamic = type(self.scaler).__name__ == "DynamicLossScaler"
        state = training_state(self.loss_cell, self.optimizer, self.scaler)
        continue_scaler(snapshot_names(state), start, config.loss_scale)
        self._start(config, workload, steps)
        self._one = ms.Tensor(1.0, mstype.float32)
        scaler = self.scaler

        def forward(*batch: Any) -> Any:
            loss = self.loss_cell(*batch)
            return scaler.scale(loss) if scaler is not None else loss

        self._grad_fn = ms.value_and_grad(forward, None, self.params)

    def _start(self, config: TrialConfig, workload: Any, steps: int) -> None:
        """What is the trial's own: its config, freshly built workload, batches and clip."""
        import mindspore as ms
        from mindspore.common import dtype as mstype

        self.config = config
        self.workload = workload
        stream = batch_stream(workload.batches, steps, skip=skip_batches(config, workload))
        self.batches = stream if self.group is None else shard_stream(stream, self.group)
        self.probe: CellProbe | None = None
        self._clip = ms.Tensor(
            float(np.finfo(np.float32).max) if config.clip is None else config.clip, mstype.float32
        )

    def restart(
        self, config: TrialConfig, workload_ref: str, steps: int, start: Mapping[str, Any] | None = None
    ) -> None:
        """Turn this replay into one of another trial of the same graph, to be fast-forwarded (which overwrites
        the network's, optimizer's and scaler's state). Keeping the optimizer keeps its compiled ``construct``
        (MindSpore's optimizers are ``jit`` functions even in PyNative): about 0.1 s of each diagnosis."""
        self._start(config, trial_workload(config, workload_ref, start), steps)

    def attach(self, probe: CellProbe) -> CellProbe:
        """Hook every Cell; only after any compiled prefix (hooks are for PyNative)."""
        self.probe = probe.attach(self.loss_cell)
        return probe

    def probed(self, probe: CellProbe, run: Callable[[], Any]) -> Any:
        """``run()`` with ``probe`` hooked on every Cell and recording, unhooked again after."""
        probe.attach(self.loss_cell)
        probe.start()
        try:
            return run()
        finally:
            probe.stop()
            probe.detach()

    def fast_forward(self, compiled: CompiledStep, steps: int, start: StartState | None = None) -> int | None:
        """Run the next ``steps`` batches on the trial's own compiled graph (no compile, the trial's arithmetic
        bit for bit), then copy its state into this PyNative replay. ``start``: the trial's starting values as
        the worker keeps them, else this replay's own. Returns the first non-finite step, or None."""
        if steps <= 0:
            return None
        self.load_start(compiled, start)
        early = self.steps_on(compiled, steps)
        if early is None:
            compiled.copy_state_into(self.loss_cell, self.optimizer, self.scaler)
        return early

    def start_on(self, compiled: CompiledStep, graphs: GraphCache | None, workload_ref: str) -> None:
        """Load the trial's starting values into ``compiled``: as the worker keeps them, else freshly built."""
        known = graphs.starts.get(start_key(self.config, workload_ref)) if graphs is not None else None
        self.load_start(compiled, known.state if known is not None else None)

    def went_on(self, compiled: CompiledStep, batch: tuple[Any, ...]) -> bool:
        """One compiled step (the update; on a gang with the ranks' reduction) on ``batch``; False where it
        broke (the reduced loss or gradients: the same answer on every rank)."""
        loss, _, finite, _ = compiled(compiled.clip_tensor(self.config.clip), batch).asnumpy()
        return bool(np.isfinite(loss)) and (finite > 0.5 or self.dynamic)

    def load_start(self, compiled: CompiledStep, start: StartState | None = None) -> None:
        """Put the trial's starting values into ``compiled`` (``start``: as the worker keeps them, else
        read from this replay's freshly built workload)."""
        if start is not None:
            compiled.load({**start, **scaler_state(self.config.loss_scale)})
        else:
            compiled.reset(self.config, self.workload)

    def on_graph(self, compiled: CompiledStep, steps: int) -> int | None:
        """Run the next ``steps`` batches on the worker's compiled graph from this replay's state.

        Unlike :meth:`fast_forward` (once, from the trial's start) this picks up
        where the replay is and may alternate with hooked PyNative steps: the
        state goes into the graph, the graph runs, the state comes back. The
        profile samples this way without compiling a graph of its own.
        """
        if steps <= 0:
            return None
        state = training_state(self.loss_cell, self.optimizer, self.scaler)
        compiled.load({key: param.asnumpy() for key, param in state.items()})
        early = self.steps_on(compiled, steps)
        compiled.copy_state_into(self.loss_cell, self.optimizer, self.scaler)
        return early

    def steps_on(self, compiled: CompiledStep, steps: int) -> int | None:
        """The next ``steps`` batches on ``compiled`` (its lean vector is loss, norm, finite, scale)."""
        clip = compiled.clip_tensor(self.config.clip)
        return self._first_nonfinite(steps, lambda batch: compiled(clip, batch).asnumpy()[[0, 2]])

    def _first_nonfinite(self, steps: int, loss_and_finite: Callable[[Any], np.ndarray]) -> int | None:
        """Feed the next ``steps`` batches to a compiled step; the first whose loss or gradients were not finite.

        Under a dynamic loss scaler a step whose gradients alone overflowed is
        not one: the graph skipped its update and lowered the scale, as the
        trial did, so the replay may start past it (the trial's first step at
        2^16 is nearly always such a step).
        """
        for index in range(steps):
            batch = next(self.batches, None)
            if batch is None:
                return None
            loss, finite = loss_and_finite(batch)
            if not np.isfinite(loss) or (finite <= 0.5 and not self.dynamic):
                return index
        return None

    def step(self, batch: tuple[Any, ...]) -> tuple[bool, list[str]]:
        """One training step with the compiled step's semantics.

        Returns whether the gradients were finite, and the names of parameters
        whose gradient was not (used only when no Cell hook caught the inf).
        """
        from mindspore import ops

        grads, norm, all_finite, bad = self._gradients(batch)
        finite = bool(all_finite.asnumpy())
        factor = ops.select(norm > self._clip, self._clip / (norm + _EPS), self._one)
        clipped = tuple(g * factor.astype(g.dtype) for g in grads)
        if self.scaler is not None:
            if finite:
                self.optimizer(clipped)
            self.scaler.adjust(all_finite)
        else:
            self.optimizer(clipped)
        return finite, bad

    def look(self, batch: tuple[Any, ...]) -> tuple[bool, list[str]]:
        """``step`` without its update: this rank's forward and backward, which on a gang are its own
        (the reduction comes after them), for the hooks to see."""
        _, _, finite, bad = self._gradients(batch)
        return bool(finite.asnumpy()), bad

    def _gradients(self, batch: tuple[Any, ...]) -> tuple[Any, Any, Any, list[str]]:
        """The unscaled gradients of one batch, their global norm, whether all are finite (a Tensor), and
        the parameters whose gradient is not."""
        from mindspore import ops
        from mindspore.common import dtype as mstype

        _, grads = self._grad_fn(*batch)
        if self.scaler is not None:
            grads = self.scaler.unscale(grads)
        flat = ops.concat([g.astype(mstype.float32).reshape(-1) for g in grads])
        norm = ops.sqrt(ops.reduce_sum(flat * flat))
        finite = ops.isfinite(flat).all()
        bad = (
            []
            if finite.asnumpy()
            else [p.name for p, g in zip(self.params, grads) if not np.isfinite(g.asnumpy()).all()]
        )
        return grads, norm, finite, bad

    def forward_only(self, batch: tuple[Any, ...]) -> None:
        self.loss_cell(*batch)

    def close(self) -> None:
        if self.probe is not None:
            self.probe.detach()


def fp32_of(config: TrialConfig) -> TrialConfig:
    return dataclasses.replace(config, amp_level=FP32_LEVEL, black_list=())


def parameter_owner(param_name: str, probe: CellProbe) -> str:
    """The Cell that owns a parameter, e.g. ``fc1.weight`` -> ``fc1``."""
    owner = param_name.rsplit(".", 1)[0] if "." in param_name else "network"
    return owner if owner in probe.order else param_name


def ensure_pynative() -> Any:
    import mindspore as ms

    mode = ms.get_context("mode")
    if mode != ms.PYNATIVE_MODE:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    return mode


def restore_mode(mode: Any) -> None:
    import mindspore as ms

    if ms.get_context("mode") != mode:
        ms.set_context(mode=mode)


#: Replays a worker keeps for its next diagnosis (the policy's and its FP32 twin's graph): one
#: more PyNative copy of the model each, so a few, the most recently used.
REPLAYS_KEPT = 2


def _kept_replay(
    config: TrialConfig, workload_ref: str, limit: int, graphs: GraphCache, start: Mapping[str, Any] | None
) -> Replay:
    """The worker's replay of this trial's graph, restarted for this trial, or a new one it keeps."""
    key = (workload_ref, config.graph_id)
    replay = graphs.replays.pop(key, None)
    if replay is None:
        replay = Replay(config, workload_ref, limit, start)
    else:
        replay.restart(config, workload_ref, limit, start)
    graphs.replays[key] = replay  # the most recently used last
    while len(graphs.replays) > REPLAYS_KEPT:
        graphs.replays.pop(next(iter(graphs.replays)))
    return replay


def skip_ahead(
    config: TrialConfig,
    workload_ref: str,
    limit: int,
    steps: int,
    compiled: CompiledStep | None,
    graphs: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
) -> tuple[Replay, int | None]:
    """A replay that has run its first ``steps`` steps without hooks, and where that went non-finite.

    On the trial's compiled graph: the worker's own when it has one (no compile, the trial's
    arithmetic), else built now (``graph_for``). With ``graphs``, a replay the worker kept from an
    earlier diagnosis of the graph is restarted instead of built: the fast-forward gives it the
    trial's state.
    """
    if steps <= 0:
        return Replay(config, workload_ref, limit, start), None
    if compiled is None:
        compiled = graph_for(config, workload_ref, graphs, start)
    if graphs is not None:
        replay = _kept_replay(config, workload_ref, limit, graphs, start)
    else:
        replay = Replay(config, workload_ref, limit, start)
    known = graphs.starts.get(start_key(config, workload_ref)) if graphs is not None else None
    return replay, replay.fast_forward(compiled, steps, known.state if known is not None else None)


def graph_for(
    config: TrialConfig,
    workload_ref: str,
    graphs: GraphCache | None,
    start: Mapping[str, Any] | None,
    group: RankGroup | None = None,
) -> CompiledStep:
    """The worker's graph of ``config``, built now (and kept, with ``graphs``) when it has none, so the
    worker's next twins, its profile and a later FP32 trial reuse it instead of compiling once per
    diagnosis."""
    held = graphs.held(config, workload_ref) if graphs is not None else None
    if held is not None:
        return held
    step = CompiledStep(config, trial_workload(config, workload_ref, start), group)
    if graphs is not None:
        graphs.hold(config, workload_ref, step)
    return step


def copy_weights(source: Any, target: Any) -> None:
    """Give the FP32 twin the policy network's current weights (PyNative: ``set_data`` is enough)."""
    import mindspore as ms

    # by Parameter.name, which every level keeps (``jobs.training._amp._keep_names``)
    targets = {param.name: param for param in target.get_parameters()}
    for param in source.get_parameters():
        twin = targets[param.name]
        twin.set_data(ms.Tensor(param.asnumpy().astype(twin.asnumpy().dtype)))
