"""The Ray actor: one long-lived process per device, running trials one by one.

MindSpore is imported and the device is set once per process; each trial's
result goes back to the driver as a ``TrialResult`` of Arrow tables, and the
driver alone writes files, so a dead actor can never leave a half-committed
trial behind.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

from ampsweep.contracts import parse_reference

from ._config import TrialConfig
from ._placement import DeviceSetup, Placement, overflow_mode
from ._result import RankAnswer, TrialResult
from .profiling._profile import Profile
from .training._baseline import Hint


class TrialWorker:
    """Actor body; the launcher wraps it with ``ray.remote`` and its backend's options."""

    def __init__(self, worker_index: int, setup: DeviceSetup) -> None:
        self.setup = setup
        if setup.cpu_core is not None and hasattr(os, "sched_setaffinity"):
            # two MindSpore processes on two cores thrash unless each owns one
            os.sched_setaffinity(0, {setup.cpu_core % (os.cpu_count() or 1)})
        # A relative workload file is relative to where Ray started us: the
        # job's (or runtime_env's) working_dir on a cluster.
        self.home = os.getcwd()
        # AMP's O1 rewrite writes generated sources under the working directory;
        # keep them out of the user's checkout
        os.chdir(tempfile.mkdtemp(prefix="ampsweep-worker-"))
        import mindspore as ms

        setup.configure_mindspore()
        from .training._data_parallel import join_group

        #: this process's rank in its gang (``sweep.cluster._gang``), or None: a single device
        self.group = join_group()  # blocks until every rank of the gang has joined
        env = setup.visible_devices_env
        self.placement = Placement(
            device_kind=setup.device_kind,
            device_target=setup.mindspore_target,
            node=_node_id(),
            device_id=os.environ.get(env, "") if env else "",
            worker_index=worker_index,
            mindspore_version=ms.__version__,
            overflow_mode=overflow_mode(setup.mindspore_target),
        )

        from .training._snapshot import Snapshots
        from .training._step import GraphCache

        self.graphs = GraphCache()
        #: the snapshots this actor's trials started from, decoded once each
        self.snapshots = Snapshots()

    def info(self) -> dict[str, Any]:
        return {**vars(self.placement), "pid": os.getpid()}

    def run(
        self,
        config: TrialConfig,
        workload_ref: str,
        baseline: Hint = None,
        start: bytes | None = None,
    ) -> TrialResult:
        """Train one trial; then, if it broke, replay it to tell why (``diagnose``). ``baseline``: the seed's
        FP32 result, or the run still computing it (``PendingBaseline``), to tell a silent failure; ``start``:
        the snapshot a forked trial starts from (checkpoint bytes)."""
        return self._trial(config, workload_ref, baseline, start)[0]

    def run_rank(
        self,
        config: TrialConfig,
        workload_ref: str,
        baseline: Hint = None,
        start: bytes | None = None,
    ) -> RankAnswer:
        """One rank's part of a data-parallel trial (``RankAnswer``).

        Every rank trains the same step on its part of each batch, and a broken
        trial is localized on every rank's part; the tables come from rank 0
        alone. The checksum of the parameters the trial ended with lets the
        gang tell ranks that trained apart.
        """
        if self.group is not None:
            self.group.progress.begin_call()
        result, checksum, apart = self._trial(config, workload_ref, baseline, start)
        rank = self.group.rank if self.group is not None else 0
        keep = rank == 0 or bool(result.error) or apart
        return RankAnswer(result if keep else None, checksum, result.anomalies, apart)

    def progress(self) -> tuple[int, int, int, float | None]:
        """How far this rank is in its current call (``Progress.reading``); the gang's driver calls it in a
        concurrency group of its own while ``run_rank`` trains."""
        return self.group.progress.reading() if self.group is not None else (0, 0, -1, None)

    def _trial(
        self, config: TrialConfig, workload_ref: str, baseline: Hint, start: bytes | None
    ) -> tuple[TrialResult, str, bool]:
        """Train, take the trained parameters' checksum (before any replay: the replay runs on the same
        graph), then localize a broken trial."""
        from .localization._diagnose import RanksApart, diagnose
        from .training._data_parallel import parameter_checksum
        from .training._trainer import run_trial

        workload_ref = self._here(workload_ref)
        params = (
            self.snapshots.read(config.start_from, start) if start is not None and config.start_from else None
        )
        started_at = datetime.now(timezone.utc)
        result = run_trial(config, workload_ref, self.placement, self.graphs, params, self.group)
        step = self.graphs.held(config, workload_ref) if self.group is not None else None
        checksum = parameter_checksum(step.named_state()) if step is not None and not result.error else ""
        apart = False
        # a replay must retrace the trial bit for bit; on a gang every rank replays its own part at once
        if config.localize and self.setup.exact_reruns:
            replay_started = time.perf_counter()
            try:
                result.anomalies = diagnose(result, workload_ref, baseline, self.graphs, params, self.group)
            except RanksApart as exc:
                result.anomalies, apart = exc.table, True
            result.diagnose_s = time.perf_counter() - replay_started
        result.started_at, result.finished_at = started_at, datetime.now(timezone.utc)
        return result, checksum, apart

    def profile(
        self,
        workload_ref: str,
        seed: int,
        steps: int,
        workload_args: dict[str, Any],
        start_step: int = 0,
        checkpoint: bytes | None = None,
    ) -> Profile:
        """The FP32 float16-headroom profile (``jobs.profiling``), on this actor's device.

        A sweep hands it to the first actor its queue leaves idle, so it runs
        while the other actors finish their last trials instead of after them
        on the driver's CPU.
        """
        from .profiling._profile import profile

        return profile(
            self._here(workload_ref),
            seed,
            steps,
            workload_args,
            start_step=start_step,
            checkpoint=checkpoint,
            graphs=self.graphs,
        )

    def _here(self, workload_ref: str) -> str:
        """A relative workload file is relative to where Ray started this actor."""
        reference = parse_reference(workload_ref)
        if reference.is_file and not os.path.isabs(reference.module):
            return str(reference.with_module(os.path.join(self.home, reference.module)))
        return workload_ref


def _node_id() -> str:
    """Ray's node id: fake multi-node clusters share one hostname, so the host name is not enough."""
    try:
        import ray

        # asking an uninitialized Ray for its context would start a local cluster
        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()[:12]
    except Exception:  # noqa: BLE001 - outside Ray (tests call the class directly)
        pass
    return socket.gethostname()
