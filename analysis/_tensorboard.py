"""A sweep folder as TensorBoard runs, from its Parquet tables alone (``ampsweep export --tensorboard``).

One run per committed trial, ``LOGDIR/<sweep>/<configuration's name> · seed <n>``: its steps table per
step, its configuration as HParams with the report's scores (:func:`analyze`) as their metrics, its
localized Cell and (in a recommended configuration's runs) the recommendation as text. Incremental and
idempotent: ``ampsweep-export.json`` lists the trials exported, and a trial's events are renamed into place
under a name the trial fixes, so writing it again (after an export stopped halfway) never adds a step twice.
tensorboardX (the ``tensorboard`` extra) encodes the events, imported on use, never into ``ampsweep run``'s
driver (its protobuf must not load before MindSpore's).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ampsweep.contracts import (
    NAME_SEPARATOR,
    STEPS_SCHEMA,
    arg_column,
    black_list_value,
    clip_value,
    committed_ids,
)

from ._public import analyze
from ._writer import _atomic_write
from .compute._anomalies import localizations, read_anomalies
from .compute._configs import as_run
from .compute._load import configurations, files_by_trial, list_parquet, resolve
from .compute._scores import trial_scores
from .compute._side_files import read_spec_file

#: beside the runs: trial id -> its run's name
MANIFEST = "ampsweep-export.json"
#: the report's per-trial scores (``trial_scores``' columns) -> their tags: the HParams dashboard's metrics
METRICS = {
    "final": "trial/final_loss",
    "steps_to_target": "trial/steps_to_target",
    "clip_rate": "trial/clip_rate",
    "first_nonfinite": "trial/first_nonfinite_step",
}
#: ``--follow``: at least this many seconds between two looks at the sweep folder ...
FOLLOW_PAUSE_S = 2.0
#: ... and a pause of at least this many times the last export's own time (so it exports a fifth of the time)
FOLLOW_REST = 4.0


@dataclass(frozen=True)
class Exported:
    """What one export did: the sweep's folder of runs, the runs it wrote, and those already there."""

    folder: Path
    written: int
    already: int


def export_tensorboard(sweep_dir: str | Path, logdir: str | Path, *, recommend: bool = True) -> Exported:
    """A run in ``logdir/<sweep>`` for each trial committed in ``sweep_dir`` (a path or a ``pyarrow.fs``
    URI) that is not there yet; the trials that are cost one listing. ``recommend=False`` leaves out the
    recommendation, which ranks the whole sweep (most of an export's time): the live export's rounds."""
    loc = resolve(sweep_dir)
    folder = Path(logdir) / loc.name
    manifest = folder / MANIFEST
    done = json.loads(manifest.read_text()) if manifest.exists() else {}
    runs: dict[str, str] = done.get("runs", {})
    files = list_parquet(loc, "trials", recursive=False)
    committed = committed_ids({path.rsplit("/", 1)[-1] for path in files})
    if committed <= runs.keys() and (not recommend or done.get("recommended") == len(runs)):
        return Exported(folder, 0, len(runs))
    result = analyze(sweep_dir, figures=False) if recommend else None
    scores = (trial_scores(sweep_dir) if result is None else result.scores).set_index("trial_id", drop=False)
    new = scores[~scores["trial_id"].isin(runs.keys())]
    steps = files_by_trial(loc, "steps", set(new["trial_id"]))
    cells = read_anomalies(sweep_dir, list(new["trial_id"]))
    grid = (read_spec_file(sweep_dir) or {}).get("grid") or {}
    spell = {part for part in ("dtype", "loss_placement") if len(grid.get(part) or ()) > 1}
    taken = set(runs.values())
    for (trial_id, row), config in zip(new.iterrows(), configurations(new)):
        name = config.trial_name(row["seed"], spell).replace("/", "∕")
        name += f"{NAME_SEPARATOR}{as_run(config)}" if isinstance(row["equivalent_to"], str) else ""
        name += f"{NAME_SEPARATOR}{trial_id}" if name in taken else ""
        # a copy's steps are its source's, and so are its scores (the ranking scans only the source)
        source = scores.loc[row["equivalent_to"]] if row["equivalent_to"] in scores.index else row
        parts = [pq.read_table(path, filesystem=loc.fs) for path in steps.get(trial_id, [])]
        table = pa.concat_tables(parts).sort_by("step") if parts else STEPS_SCHEMA.empty_table()
        found = localizations(cells[cells["trial_id"] == trial_id], {trial_id: row["seed"]})
        events = _trial_events(config, row, source, table, found[0].text if found else None)
        _write_events(folder / name, f"{_epoch(row['started_at']):010d}.ampsweep.{trial_id}", events)
        runs[trial_id] = name
        taken.add(name)
    from tensorboardX.summary import text

    stamp = max([_epoch(t) for t in scores["finished_at"]], default=0)
    for kind in [] if result is None else result.kinds:
        best, recommendation = kind.recommended, kind.recommendation
        words = [text("recommendation", "\n\n".join(recommendation.answer or (recommendation.headline,)))]
        for trial_id in [] if best is None else str(best["trial_ids"]).split():
            suffix = f"{stamp:010d}.ampsweep.recommendation-{len(scores)}"
            _write_events(folder / runs[trial_id], suffix, _events(len(scores), stamp, words))
    # how many trials the last recommendation written was drawn from
    recommended = len(scores) if recommend else done.get("recommended")
    _atomic_write(
        manifest, json.dumps({"sweep": loc.root, "runs": runs, "recommended": recommended}, indent=1)
    )
    return Exported(folder, len(new), len(runs) - len(new))


def _trial_events(config: Any, row: pd.Series, source: pd.Series, table: pa.Table, cell: str | None) -> list:
    """One trial's events: its HParams, a scalar per number of its steps table per step, its scores at
    its last step, and its localized Cell."""
    from tensorboardX.summary import Summary, hparams, text

    values = {
        "amp_level": config.amp_level,
        "black_list": black_list_value(config.black_list),
        "clip": clip_value(config.clip),
        "loss_scale": config.loss_scale,
        "dtype": config.dtype,
        "loss_placement": config.loss_placement,
        **{arg_column(name): value for name, value in config.workload_args},
        "devices": 1 if pd.isna(row["devices"]) else int(row["devices"]),
        "seed": int(row["seed"]),
        "trial_id": row["trial_id"],
        "outcome": row["outcome"],
        "verdict": row["verdict"],
    }
    start = _epoch(row["started_at"]) or _epoch(row["finished_at"])
    events = _events(0, start, hparams(values, dict.fromkeys(METRICS.values(), 0.0)))
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)
    numbers = [f.name for f in table.schema if f.name != "step" and any(is_(f.type) for is_ in numeric)]
    rows = np.column_stack(
        [table.column(n).cast(pa.float64()).to_numpy(zero_copy_only=False) for n in numbers]
    )
    took = rows[:, numbers.index("step_ms")] if "step_ms" in numbers else np.zeros(len(rows))
    walls = start + np.cumsum(np.nan_to_num(took)) / 1000.0
    last = int(table.column("step")[-1].as_py()) if table.num_rows else 0
    for step, wall, values_at in zip(table.column("step").to_pylist(), walls, rows.tolist()):
        scalars = Summary(value=[Summary.Value(tag=n, simple_value=v) for n, v in zip(numbers, values_at)])
        events += _events(step, wall, [scalars])
    scores = {tag: source[column] for column, tag in METRICS.items()}
    finite = [Summary.Value(tag=t, simple_value=float(v)) for t, v in scores.items() if pd.notna(v)]
    events += _events(last, walls[-1] if len(walls) else start, [Summary(value=finite)])
    return events + (_events(last, start, [text("localized_cell", cell)]) if cell else [])


def _events(step: int, wall: float, summaries: Any) -> list:
    """Each summary as an event at ``step``, ``wall`` seconds since the epoch."""
    from tensorboardX.proto.event_pb2 import Event

    return [Event(wall_time=float(wall), step=int(step), summary=summary) for summary in summaries]


def _write_events(run: Path, suffix: str, events: list) -> None:
    """``events`` as the file ``events.out.tfevents.<suffix>`` of ``run``: written under a temporary name,
    which TensorBoard does not read (it reads names with 'tfevents'), then renamed into place."""
    from tensorboardX import RecordWriter
    from tensorboardX.proto.event_pb2 import Event

    run.mkdir(parents=True, exist_ok=True)
    temporary = run / f".tmp-{uuid.uuid4().hex}"
    try:
        writer = RecordWriter(str(temporary))
        for event in [Event(wall_time=time.time(), file_version="brain.Event:2"), *events]:
            writer.write(event.SerializeToString())
        writer.close()
        temporary.replace(run / f"events.out.tfevents.{suffix}")
    finally:
        temporary.unlink(missing_ok=True)


def _epoch(stamp: Any) -> int:
    """Whole seconds since the epoch of a trials-table timestamp; 0 where there is none."""
    return 0 if pd.isna(stamp) else int(pd.Timestamp(stamp).timestamp())


def follow(sweep_dir: str, logdir: str) -> None:
    """Export ``sweep_dir`` again and again until standard input closes (the driver's sweep is over), then
    once more: ``ampsweep run --tensorboard``'s exporter, a process of its own beside the driver."""
    os.nice(10)  # background work: the driver and the trials come first where they share the cores
    while True:
        started = time.monotonic()
        export_tensorboard(sweep_dir, logdir, recommend=False)
        pause = max(FOLLOW_PAUSE_S, FOLLOW_REST * (time.monotonic() - started))
        if select.select([sys.stdin], [], [], pause)[0]:  # the driver writes nothing: readable is closed
            break
    export_tensorboard(sweep_dir, logdir)


if __name__ == "__main__":
    try:
        follow(*sys.argv[1:3])
    except KeyboardInterrupt:  # Ctrl-C reached the driver too; what was written stays, and the next export
        sys.exit(130)  # writes the rest
