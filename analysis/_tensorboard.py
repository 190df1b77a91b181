"""A sweep folder as TensorBoard runs, from its Parquet tables alone (``ampsweep export --tensorboard``).

One run per committed trial (docs/tensorboard.md); incremental and idempotent: ``ampsweep-export.json``
keeps a digest of what each run shows, a run whose digest changed is written again in place, under a name
the trial fixes. tensorboardX encodes the events, imported on use, never into ``ampsweep run``'s driver
(its protobuf must not load before MindSpore's).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
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
    CONFIRM_FOLDER,
    HORIZON_FOLDER,
    NAME_SEPARATOR,
    STEPS_SCHEMA,
    arg_column,
    black_list_value,
    clip_value,
)

from ._public import analyze
from ._writer import atomic_write
from .compute._anomalies import localizations, read_anomalies
from .compute._configs import as_run
from .compute._load import SweepLocation, configurations, files_by_trial, list_parquet, resolve
from .compute._scores import trial_scores
from .compute._side_files import read_spec_file
from .wording._localization import localization_phrase

#: beside the runs: the sweep's folder, trial id -> its run's name and -> the digest of what the run shows
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
    """What one export did: the sweep's folder of runs, the runs it wrote for new trials, those already
    there, and how many of those it wrote again because what they show changed."""

    folder: Path
    written: int
    already: int
    rewritten: int = 0


def logdir_problem(sweep_dir: str | Path, logdir: str | Path) -> str | None:
    """What ``logdir`` must be to take ``sweep_dir``'s runs, and why it is not; None when it can. Checked
    before a sweep or an export starts: found by the export, it comes after the whole analysis (or, live,
    after the sweep); and another sweep's runs under the same name would merge with these."""
    loc = resolve(sweep_dir)
    folder = Path(logdir).absolute() / loc.name
    there = next(path for path in (folder, *folder.parents) if path.exists())
    if not there.is_dir() or not os.access(there, os.W_OK | os.X_OK):
        return f"a folder it can write to ({there} is {'not writable' if there.is_dir() else 'a file'})"
    other = _manifest(folder).get("sweep", loc.root)
    if other != loc.root:
        return (
            f"a folder where {loc.name}/ holds this sweep's runs or none (it holds another sweep's: {other})"
        )
    return None


def export_tensorboard(sweep_dir: str | Path, logdir: str | Path, *, recommend: bool = True) -> Exported:
    """A run in ``logdir/<sweep>`` for each trial committed in ``sweep_dir`` (a path or a ``pyarrow.fs``
    URI) that is not there yet or shows something else now; a folder with nothing committed since costs a
    listing. ``recommend=False`` leaves out the recommendation, which ranks the whole sweep (most of an
    export's time): the live export's rounds. A ``logdir`` that cannot take the runs is a ``ValueError``."""
    problem = logdir_problem(sweep_dir, logdir)
    if problem is not None:
        raise ValueError(f"--tensorboard: {str(logdir)!r} is not allowed; {problem}")
    loc = resolve(sweep_dir)
    folder = Path(logdir) / loc.name
    # the search's confirmation and the continuations to the horizon: sweep folders of their own
    below = [export_tensorboard(sub, folder, recommend=False) for sub in _subs(sweep_dir, loc)]
    done = _manifest(folder)
    runs: dict[str, str] = done.get("runs", {})
    digests: dict[str, str] = done.get("shown", {})
    # what decides what the runs show: the trials committed here and the continuations (merged into them)
    listed = _digest(
        [*list_parquet(loc, "trials", False), *list_parquet(loc, f"{HORIZON_FOLDER}/trials", False)]
    )
    if listed == done.get("listed") and (not recommend or done.get("recommended") == listed):
        return _sum(Exported(folder, 0, len(runs)), below)
    result = analyze(sweep_dir, figures=False) if recommend else None
    scores = (trial_scores(sweep_dir) if result is None else result.scores).set_index("trial_id", drop=False)
    cells = dict(tuple(read_anomalies(sweep_dir, list(scores["trial_id"])).groupby("trial_id")))
    grid = (read_spec_file(sweep_dir) or {}).get("grid") or {}
    spell = {part for part in ("dtype", "loss_placement") if len(grid.get(part) or ()) > 1}
    taken, already, changed = set(runs.values()), set(runs), {}
    for (trial_id, row), config in zip(scores.iterrows(), configurations(scores)):
        devices = 1 if pd.isna(row["devices"]) else int(row["devices"])
        rows = cells.get(trial_id)
        found = [] if rows is None else localizations(rows, {trial_id: row["seed"]}, devices=devices)
        # a copy's steps are its source's, and so are its scores (the ranking scans only the source)
        source = scores.loc[row["equivalent_to"]] if row["equivalent_to"] in scores.index else row
        shown = _shown(config, row, devices, source, localization_phrase(found[0]) if found else None)
        if trial_id in runs and digests.get(trial_id) == _digest(shown):
            continue
        if trial_id not in runs:
            name = config.trial_name(row["seed"], spell).replace("/", "∕")
            name += f"{NAME_SEPARATOR}{as_run(config)}" if isinstance(row["equivalent_to"], str) else ""
            runs[trial_id] = name + (f"{NAME_SEPARATOR}{trial_id}" if name in taken else "")
            taken.add(runs[trial_id])
        changed[trial_id] = (row, shown)
    steps = files_by_trial(loc, "steps", set(changed))
    for trial_id, (row, shown) in changed.items():
        parts = [pq.read_table(path, filesystem=loc.fs) for path in steps.get(trial_id, [])]
        table = pa.concat_tables(parts).sort_by("step") if parts else STEPS_SCHEMA.empty_table()
        events = _trial_events(shown, _epoch(row["started_at"]) or _epoch(row["finished_at"]), table)
        _write_events(
            folder / runs[trial_id], f"{_epoch(row['started_at']):010d}.ampsweep.{trial_id}", events
        )
        digests[trial_id] = _digest(shown)
    if result is not None:
        _recommend(folder, runs, result, scores)
    recommended = listed if recommend else done.get("recommended")
    record = {"sweep": loc.root, "runs": runs, "shown": digests, "listed": listed, "recommended": recommended}
    atomic_write(folder / MANIFEST, json.dumps(record, indent=1))
    again = len(already & changed.keys())
    return _sum(Exported(folder, len(changed) - again, len(already) - again, again), below)


def _recommend(folder: Path, runs: dict[str, str], result: Any, scores: pd.DataFrame) -> None:
    """The recommendation as text in the runs of the recommended configuration (one per device kind), and
    in no other: a run recommended by an earlier export that is not now loses its text."""
    from tensorboardX.summary import text

    stamp = max([_epoch(t) for t in scores["finished_at"]], default=0)
    suffix = f"{stamp:010d}.ampsweep.recommendation-{len(scores)}"
    chosen: dict[str, list] = {}
    for kind in result.kinds:
        best, recommendation = kind.recommended, kind.recommendation
        words = [text("recommendation", "\n\n".join(recommendation.answer or (recommendation.headline,)))]
        chosen.update({runs[t]: words for t in ([] if best is None else str(best["trial_ids"]).split())})
    for old in folder.glob("*/events.out.tfevents.*.ampsweep.recommendation-*"):
        if old.parent.name not in chosen or old.name != f"events.out.tfevents.{suffix}":
            old.unlink()
    for name, words in chosen.items():
        _write_events(folder / name, suffix, _events(len(scores), stamp, words))


def _manifest(folder: Path) -> dict[str, Any]:
    """What the last export into ``folder`` recorded; nothing before the first (or after one that stopped
    before it saved it: each trial is then written again, in place)."""
    manifest = folder / MANIFEST
    return json.loads(manifest.read_text()) if manifest.exists() else {}


def _digest(value: Any) -> str:
    """A short fingerprint of ``value`` (a JSON-able structure; NumPy scalars as text)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _subs(sweep_dir: str | Path, loc: SweepLocation) -> list[str]:
    """The sub-folders that are sweep folders of their own and hold trials (``confirm/``, ``horizon/``),
    named as ``sweep_dir`` is (a URI's query stays at its end)."""
    path, _, query = str(sweep_dir).partition("?")
    subs = [sub for sub in (CONFIRM_FOLDER, HORIZON_FOLDER) if loc.is_dir(sub, "trials")]
    return [f"{path.rstrip('/')}/{sub}" + (f"?{query}" if query else "") for sub in subs]


def _sum(top: Exported, below: list[Exported]) -> Exported:
    """One export's counts with those of its sub-folders'."""
    counts = ("written", "already", "rewritten")
    return Exported(top.folder, *(sum(getattr(e, count) for e in [top, *below]) for count in counts))


def _shown(config: Any, row: pd.Series, devices: int, source: pd.Series, cell: str | None) -> dict[str, Any]:
    """What a trial's run shows beside its steps (which its commit fixes): its HParams, the report's scores
    of it and its localized Cell; the scores and the verdict change as other trials commit."""
    values = {
        "amp_level": config.amp_level,
        "black_list": black_list_value(config.black_list),
        "clip": clip_value(config.clip),
        "loss_scale": config.loss_scale,
        "dtype": config.dtype,
        "loss_placement": config.loss_placement,
        **{arg_column(name): value for name, value in config.workload_args},
        "devices": devices,
        "seed": int(row["seed"]),
        "trial_id": row["trial_id"],
        "outcome": row["outcome"],
        "verdict": row["verdict"],
    }
    scores = {tag: float(source[column]) for column, tag in METRICS.items() if pd.notna(source[column])}
    return {"hparams": values, "scores": scores, "cell": cell}


def _trial_events(shown: dict[str, Any], start: int, table: pa.Table) -> list:
    """One trial's events: its HParams, a scalar per number of its steps table per step, its scores at
    its last step, and its localized Cell (``shown``, :func:`_shown`); ``start``: its start, in seconds."""
    from tensorboardX.summary import Summary, hparams, text

    events = _events(0, start, hparams(shown["hparams"], dict.fromkeys(METRICS.values(), 0.0)))
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
    finite = [Summary.Value(tag=t, simple_value=v) for t, v in shown["scores"].items()]
    events += _events(last, walls[-1] if len(walls) else start, [Summary(value=finite)])
    cell = shown["cell"]
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
    once more: ``ampsweep run --tensorboard``'s exporter, a process of its own beside the driver. A round
    that fails (a file being replaced, a full disk) is said once, and the next round tries again: one
    round's error must not end the export for the rest of the sweep."""
    os.nice(10)  # background work: the driver and the trials come first where they share the cores
    said = False
    while True:
        started = time.monotonic()
        try:
            export_tensorboard(sweep_dir, logdir, recommend=False)
        except Exception as exc:  # whatever it was, the next round may not meet it
            if not said:
                why = " ".join(f"{type(exc).__name__}: {exc}".split())
                print(
                    f"ampsweep: the live TensorBoard export failed ({why}); it tries again each round",
                    file=sys.stderr,
                    flush=True,
                )
            said = True
        pause = max(FOLLOW_PAUSE_S, FOLLOW_REST * (time.monotonic() - started))
        if select.select([sys.stdin], [], [], pause)[0]:  # the driver writes nothing: readable is closed
            break
    export_tensorboard(sweep_dir, logdir)


if __name__ == "__main__":
    # the driver's SIGTERM when it stops: end as on Ctrl-C, each run written whole or not at all
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        follow(*sys.argv[1:3])
    except KeyboardInterrupt:  # Ctrl-C reached the driver too; what was written stays, and the next export
        sys.exit(130)  # writes the rest
