"""What ``Watch`` does at the first non-finite loss: localize from a snapshot, write watch.json and spec.yaml.

Localization is the sweep's own (``jobs.localization._localize``): the user's workload is
built from its factory as a forked trial that starts at the snapshot, under
the AMP policy the user's training ran, and replayed with hooks on every Cell
up to a little past the step where the user's loss broke. The spec it writes
is a sweep that starts from the same snapshot, so it reaches the failure in a
few hundred steps instead of thousands.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ampsweep.contracts import FP32_LEVEL, INPUT, NOT_REPRODUCED

from .._config import TrialConfig
from ..localization._cause import input_fault
from ..localization._localize import finding_order
from ..training._data_parallel import PeerFailed, RankGroup
from ._watch_snapshots import Policy, Snapshot

#: the spec trains this many steps past the failure at least ...
MARGIN_STEPS = 200
#: ... and at least this many times the distance from the snapshot to the failure
MARGIN_FACTOR = 2
#: clip thresholds the spec tries beside no clipping
CLIPS = (1.0, 5.0)
#: seeds in the spec: the one the user's run was built with, and this many more
EXTRA_SEEDS = 2
#: without the training's planned length, the written spec's horizon is this many times the failing step
HORIZON_FACTOR = 2
#: the replay runs this many steps past the user's failure step before it gives up
RETRY_STEPS = 100


@dataclass
class Finding:
    """What the replay found: the Cell, its class and the phase; empty when it found nothing."""

    cell: str | None = None
    cell_class: str | None = None
    phase: str | None = None
    replay_step: int | None = None
    #: where the sweep's own compiled step, replayed from the snapshot, first broke (global)
    compiled_step: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    #: in a data-parallel job: the rank whose part broke first, and how many ranks' parts broke there
    rank: int | None = None
    ranks_broken: int | None = None
    #: the replay raised (the note says where and what): no Cell, and Watch's spec starts a search
    failed: bool = False
    #: ``input`` (a batch held a non-finite value) or ``not_reproduced`` (the replay stayed finite): not
    #: the precision settings, so no spec to sweep them is written; None: numerics, or nothing found
    cause: str | None = None


def localize_from(
    workload: str,
    workload_args: dict[str, Any],
    seed: int,
    policy: Policy,
    snapshot: Snapshot | None,
    failed_at: int,
    group: RankGroup | None = None,
) -> Finding:
    """Replay the user's workload from ``snapshot`` under ``policy`` and name the Cell that broke.

    ``failed_at`` is the global step whose loss was first non-finite. The
    replay is a trial of the sweep's own kind, so it starts from the snapshot
    exactly as a trial of the spec will (data positioned by ``start_step``).
    ``group``: this rank in a data-parallel job, where every rank replays its
    own part of the global batch at once (``jobs.localization._localize.on_ranks``); the
    finding is this rank's (``first_of_ranks`` merges them).
    """
    import mindspore as ms

    from ..localization._localize import localize
    from ..training._snapshot import read_checkpoint, snapshot_id

    start, start_from, params = 0, None, None
    if snapshot is not None:
        data = snapshot.path.read_bytes()
        start_from, params = snapshot_id(data), read_checkpoint(data)
        start = snapshot.step
    until = max(0, failed_at - start)

    limit = until + 1 + RETRY_STEPS
    config = _config(workload, workload_args, seed, policy, limit, start, start_from)
    compiled_step = None
    target = str(ms.get_context("device_target"))
    bad = input_fault(config, workload, until + 1, params, group)
    if bad is not None:  # no Cell is to blame for a batch that was broken before the network saw it
        at = None if not bad.mine else start + bad.step
        return Finding(
            replay_step=at, note=bad.note or None, rank=None if group is None else group.rank, cause=INPUT
        )
    if group is not None:
        # the ranks' compiled replay runs to where it breaks first, then each rank looks there
        table = localize(
            config,
            workload,
            mode="nonfinite",
            device_target=target,
            until_step=limit - 1,
            start=params,
            group=group,
        )
    else:
        # The user's graph and the replay's round float16 differently, so the replay may break a few
        # dozen steps apart: find where a compiled replay breaks first (cheap), then look there with hooks.
        compiled_at = _first_nonfinite_compiled(config, workload, limit, params)
        if compiled_at is None:
            return Finding(cause=NOT_REPRODUCED, note=_not_reproduced(failed_at, start, limit))
        look_at = compiled_at
        table = localize(
            config, workload, mode="nonfinite", device_target=target, until_step=look_at, start=params
        )
        compiled_step = None if compiled_at is None else start + compiled_at
    if table.num_rows == 0:
        return Finding(
            compiled_step=compiled_step,
            note=f"the replay from step {start} stayed finite through step {start + until + RETRY_STEPS}: "
            "does the factory rebuild the data this run trained on (seed, start_step)?",
        )
    row = table.to_pylist()[0]
    detail = {key: row[key] for key in ("input_dtype", "output_dtype", "max_abs", "fp32_max_abs")}
    return Finding(
        cell=row["cell"],
        cell_class=row["cell_class"],
        phase=row["phase"],
        replay_step=start + int(row["replay_step"]),
        compiled_step=compiled_step,
        detail=detail,
        note=row["note"],
        rank=None if group is None else group.rank,
        ranks_broken=None if group is None else 1,
    )


def _not_reproduced(failed_at: int, start: int, limit: int) -> str:
    """'The NaN at step 1,649 did not reproduce from the snapshot at step 1,600: ...'"""
    import mindspore as ms

    device = f"device {ms.get_context('device_id')} on node {socket.gethostname()}"
    return (
        f"The NaN at step {failed_at:,} did not reproduce from the snapshot at step {start:,} (the replay stayed "
        f"finite through step {start + limit - 1:,}): not your precision settings. Suspect: {device}"
    )


#: the longest finding, as JSON bytes, that the ranks exchange (``first_of_ranks``)
_FINDING_BYTES = 16384


def first_of_ranks(finding: Finding, group: RankGroup, dynamic: bool) -> Finding:
    """Every rank's finding, gathered on every rank (one collective) and merged by ``first_found``.

    Each rank encodes its finding as JSON in a fixed-length float32 vector (one
    value per byte: MindSpore's CPU collectives gather float32), which
    ``AllGather`` stacks in rank order. Every rank enters it, a failed one too.
    """
    import mindspore as ms
    import numpy as np
    from mindspore import ops

    data = json.dumps(asdict(finding)).encode()[:_FINDING_BYTES]
    vector = np.zeros((1, _FINDING_BYTES + 1), np.float32)
    vector[0, 0] = len(data)
    vector[0, 1 : len(data) + 1] = np.frombuffer(data, np.uint8)
    gathered = ops.AllGather()(ms.Tensor(vector)).asnumpy()
    found = [Finding(**json.loads(row[1 : int(row[0]) + 1].astype(np.uint8).tobytes())) for row in gathered]
    return first_found(found, group.rank, dynamic)


def first_found(found: list[Finding], rank: int, dynamic: bool) -> Finding:
    """The ranks' findings (in rank order) merged into the one a single device gives (``finding_order``:
    the step, forward before backward, a dynamic scaler's backward-only fallback last, then the rank),
    with how many ranks broke there in that phase.

    A failure on any rank wins, as the failing rank tells it: a merge that lacks a rank's part could
    name the wrong first Cell. Nothing named on any rank: this rank's own finding (each says why).
    """
    failures = [f for f in found if f.failed]
    if failures:
        return next((f for index, f in enumerate(found) if f.failed and f.rank == index), failures[0])
    inputs = [f for f in found if f.cause == INPUT and f.replay_step is not None]
    if inputs:  # the rank whose part of the batch held it
        return min(inputs, key=lambda f: (int(f.replay_step or 0), f.rank or 0))
    named = [f for f in found if f.cell_class is not None and f.replay_step is not None]
    if not named:
        return found[rank]

    def order(f: Finding) -> tuple[int, ...]:
        return finding_order(int(f.replay_step or 0), f.phase, f.rank, dynamic)

    first = min(named, key=order)
    first.ranks_broken = sum(order(f)[:-1] == order(first)[:-1] for f in named)
    return first


def failure(group: RankGroup | None, exc: BaseException) -> Finding:
    """The finding of a localization that raised: no Cell, the error in the note (worded as the sweep's
    anomalies word it). ``PeerFailed`` names the rank whose own part failed (``agree``)."""
    if isinstance(exc, PeerFailed):
        return Finding(note=f"localization failed on {exc}", rank=exc.rank, failed=True)
    rank, where = (None, "") if group is None else (group.rank, f" on rank {group.rank} of {group.size}")
    return Finding(note=f"localization failed{where}: {described(exc)}", rank=rank, failed=True)


def described(exc: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _first_nonfinite_compiled(
    config: TrialConfig, workload: str, steps: int, params: dict[str, Any] | None
) -> int | None:
    """The first step (counted from the start) at which a compiled replay's loss or gradients broke: the
    sweep's own train step (``CompiledStep``), from the snapshot."""
    from ..localization._replay import Replay, graph_for

    compiled = graph_for(config, workload, None, params)
    replay = Replay(config, workload, steps, params)
    try:
        replay.load_start(compiled)
        return replay.steps_on(compiled, steps)
    finally:
        replay.close()


def _config(
    workload: str,
    workload_args: dict[str, Any],
    seed: int,
    policy: Policy,
    steps: int,
    start: int,
    start_from: str | None,
) -> TrialConfig:
    return TrialConfig(
        workload=workload,
        steps=steps,
        abort_after=10,
        amp_level=policy.amp_level,
        black_list=(),
        clip=None,
        loss_scale=policy.loss_scale,
        dtype=policy.dtype,
        seed=seed,
        workload_args=dict(workload_args),
        start_step=start,
        start_from=start_from,
    )


def spec_for(
    workload: str,
    workload_args: dict[str, Any],
    seed: int,
    policy: Policy,
    snapshot: Snapshot | None,
    failed_at: int,
    finding: Finding,
    out: Path,
    planned: int | None = None,
    devices: int = 1,
) -> dict[str, Any]:
    """The sweep that answers this failure: the policy in use and O0 × [] and [class] × clips × seeds.

    ``devices``: the data-parallel job's group size; each trial then runs on as many devices, on the
    job's global batch.

    It forks from the snapshot (a path relative to the spec, which sits in
    ``out``) and trains past the failure with a margin, so the other seeds,
    whose batches differ, reach it too. With no Cell named it lets
    ``search: adaptive`` find the black list.

    ``horizon`` is ``planned``, the training's own length, so the answer is
    continued to where the user's training really ends; without it, well past
    the failure (:data:`HORIZON_FACTOR` times its step), and the spec's
    ``horizon_note`` says so. An adaptive search confirms by its own longer
    round instead.
    """
    start = snapshot.step if snapshot is not None else 0
    # the sweep's compiled step may break later than the user's graph did: reach past both
    distance = max(failed_at, finding.compiled_step or 0, finding.replay_step or 0) - start + 1
    levels = [policy.amp_level] if policy.amp_level == FP32_LEVEL else [policy.amp_level, FP32_LEVEL]
    grid: dict[str, Any] = {"amp_level": levels}
    if finding.cell_class is not None:
        grid["black_list"] = [[], [finding.cell_class]]
    grid["clip"] = [None, *CLIPS]
    if policy.loss_scale != "none":
        grid["loss_scale"] = [policy.loss_scale]
    if policy.dtype != "float16":
        grid["dtype"] = [policy.dtype]
    grid["seed"] = [seed + k for k in range(EXTRA_SEEDS + 1)]
    name = f"watch-{(finding.cell_class or 'nonfinite').lower()}-step{failed_at}"
    spec: dict[str, Any] = {"name": name, "workload": workload}
    if workload_args:
        spec["workload_args"] = dict(workload_args)
    spec["steps"] = distance + max(MARGIN_STEPS, MARGIN_FACTOR * distance)
    if snapshot is not None:
        spec["start_from"] = {"checkpoint": os.path.relpath(snapshot.path, out), "step": snapshot.step}
    if devices > 1:
        spec["devices_per_trial"] = devices
    adaptive = finding.cell_class is None and policy.amp_level != FP32_LEVEL
    if adaptive:
        spec["search"] = "adaptive"
    end = start + spec["steps"]
    horizon = planned if planned is not None else HORIZON_FACTOR * failed_at
    if not adaptive and horizon > end:
        spec["horizon"] = horizon
    spec["grid"] = grid
    return spec


def horizon_note(spec: dict[str, Any], planned: int | None) -> str | None:
    """Where the written spec's horizon came from, in one line (None: it has none)."""
    if "horizon" not in spec:
        return None
    if planned is not None:
        return f"horizon {spec['horizon']:,}: the training's planned length"
    return (
        f"horizon {spec['horizon']:,}: {HORIZON_FACTOR}x the failing step (the training's planned length "
        "was not known: pass Watch(planned_steps=...) to set it)"
    )


def write_outputs(
    out: Path,
    spec: dict[str, Any],
    finding: Finding,
    policy: Policy,
    snapshot: Snapshot | None,
    failed_at: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Write ``OUT/watch.json`` (what was found) and ``OUT/spec.yaml`` (what to run next); return the former."""
    out.mkdir(parents=True, exist_ok=True)
    spec_path: Path | None = out / "spec.yaml"
    if finding.cause is not None:  # a bad batch or a device fault: no precision setting is to sweep
        spec_path = None
    else:
        header = (
            f"# written by ampsweep.Watch: the loss was first non-finite at step {failed_at}\n"
            f"# run it with: ampsweep run {spec_path} --out {out / 'runs'}\n"
        )
        if extra.get("horizon_note"):
            header += f"# {extra['horizon_note']}\n"
        out.joinpath("spec.yaml").write_text(
            header + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None)
        )
    report = {
        "first_nonfinite_step": failed_at,
        "cell": finding.cell,
        "class": finding.cell_class,
        "phase": finding.phase,
        "snapshot": None if snapshot is None else str(snapshot.path),
        "snapshot_step": None if snapshot is None else snapshot.step,
        "replay_step": finding.replay_step,
        "compiled_step": finding.compiled_step,
        "rank": finding.rank,
        "ranks_broken": finding.ranks_broken,
        "amp_level": policy.amp_level,
        "dtype": policy.dtype,
        "loss_scale": policy.loss_scale,
        **finding.detail,
        "note": finding.note,
        "cause": finding.cause,
        "spec": None if spec_path is None else str(spec_path),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **extra,
    }
    (out / "watch.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def one_line(
    finding: Finding, failed_at: int, snapshot: Snapshot | None, spec_path: Path | None, out: Path
) -> str:
    """What was found and the command to run next, on one line."""
    if spec_path is None:  # not the precision settings: the note says what it was
        return f"ampsweep.Watch: loss non-finite at step {failed_at}: {finding.note}"
    start = f"replayed from the snapshot at step {snapshot.step}" if snapshot else "replayed from step 0"
    if finding.cell_class is not None:
        found = f"{finding.cell} ({finding.cell_class}) went non-finite in {finding.phase}"
        if finding.rank is not None:
            found += f" on rank {finding.rank}'s part of the batch"
    else:
        found = (finding.note if finding.failed else None) or "no Cell caught"
    return (
        f"ampsweep.Watch: loss non-finite at step {failed_at}; {found} ({start}); "
        f"next: ampsweep run {spec_path} --out {out / 'runs'}"
    )
