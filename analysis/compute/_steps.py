"""Per-trial aggregation of the step tables, in one streaming pass.

Nothing materialises the ``steps`` dataset: each trial's files are read batch by batch and folded into a
small accumulator, so memory grows with the longest trial, never with the sweep. The rules (the report
quotes them; docs/ranking.md, "Per-trial figures"): a step is non-finite when its ``nonfinite`` flag is
set or its loss is not finite, and the first non-finite step is the first non-finite *loss*
(:func:`ampsweep.contracts.first_nonfinite_step`); the clip rate counts finite steps only (a non-finite
step's norm means nothing); a loss spike is a finite loss above ``SPIKE_FACTOR`` x the median of the
previous ``SPIKE_WINDOW`` finite losses, once that many exist and while the median is positive; steps to
target and the final loss are the contract's (:mod:`ampsweep.contracts`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.lib.stride_tricks import sliding_window_view

from ampsweep.contracts import TARGET_WINDOW, final_loss_rows

from ._load import SweepLocation, files_by_trial, resolve

SPIKE_FACTOR = 3.0
SPIKE_WINDOW = 20

BATCH_ROWS = 65_536

#: Only these columns are read; the rest of the step table is never decoded.
STEP_COLUMNS = (
    "step",
    "loss",
    "grad_norm",
    "clipped",
    "nonfinite",
    "skipped",
    "step_ms",
)
_BOOL_COLUMNS = ("clipped", "nonfinite", "skipped")

STEP_SCORE_COLUMNS = (
    "step_rows",
    "first_step",
    "last_step",
    "nonfinite_steps",
    "finite_steps",
    "skipped_steps",
    "clipped_steps",
    "first_nonfinite_step_seen",
    "loss_spikes",
    "steps_to_target",
    "final_loss_steps",
    "start_loss_steps",
    "median_step_ms",
    "median_grad_norm",
    "p90_grad_norm",
    "max_grad_norm",
)


class TrialAccumulator:
    """Folds one trial's step batches, in step order, into its scores.

    Kept as explicit state (not a pandas groupby) so a trial never has to be in
    memory at once and the same code serves the streaming and sorted paths.
    """

    def __init__(self, n_rows: int, target: float) -> None:
        self._final_from = n_rows - final_loss_rows(n_rows)
        self._target = target
        self._rows = 0
        self._first_step: int | None = None
        self._last_step: int | None = None
        self._first_bad: int | None = None
        self._bad = 0
        self._skipped = 0
        self._clipped = 0
        self._spikes = 0
        self._to_target: int | None = None
        self._final_sum = 0.0
        self._final_n = 0
        # the first rows, as many as the final loss averages: where the trial started from
        self._start_rows = final_loss_rows(n_rows)
        self._start_sum = 0.0
        self._start_n = 0
        self._spike_prev = np.empty(0)
        self._ma_prev = np.empty(0)
        self._step_ms: list[np.ndarray] = []
        self._grad: list[np.ndarray] = []

    def update(self, cols: Mapping[str, np.ndarray]) -> bool:
        """Fold one batch; return False if steps are not strictly increasing."""
        step = cols["step"]
        n = len(step)
        if n == 0:
            return True
        if (self._last_step is not None and step[0] <= self._last_step) or bool(np.any(np.diff(step) <= 0)):
            return False
        loss = cols["loss"]
        loss_ok = np.isfinite(loss)
        bad = cols["nonfinite"] | ~loss_ok
        if self._first_step is None:
            self._first_step = int(step[0])
        self._last_step = int(step[-1])
        if self._first_bad is None and not loss_ok.all():
            self._first_bad = int(step[int(np.argmax(~loss_ok))])
        self._bad += int(bad.sum())
        self._skipped += int(cols["skipped"].sum())
        self._clipped += int((cols["clipped"] & ~bad).sum())

        in_final = np.arange(self._rows, self._rows + n) >= self._final_from
        final_mask = in_final & loss_ok
        self._final_sum += float(loss[final_mask].sum())
        self._final_n += int(final_mask.sum())
        start_mask = (np.arange(self._rows, self._rows + n) < self._start_rows) & loss_ok
        self._start_sum += float(loss[start_mask].sum())
        self._start_n += int(start_mask.sum())

        self._count_spikes(loss[loss_ok])
        self._find_target(loss)

        self._step_ms.append(cols["step_ms"][np.isfinite(cols["step_ms"])])
        grad = cols["grad_norm"]
        self._grad.append(grad[~bad & np.isfinite(grad)])
        self._rows += n
        return True

    def _count_spikes(self, finite_loss: np.ndarray) -> None:
        seq = np.concatenate([self._spike_prev, finite_loss])
        n = len(seq) - SPIKE_WINDOW
        if n > 0:
            # A spike needs current > factor x median > 0, and the median is at
            # least the window's minimum: a rolling minimum (W cheap passes)
            # rules out nearly every step, and the exact median is taken only
            # for the few candidates left. Same result as the median everywhere.
            low = seq[:n].copy()
            for k in range(1, SPIKE_WINDOW):
                np.minimum(low, seq[k : k + n], out=low)
            current = seq[SPIKE_WINDOW:]
            candidates = np.flatnonzero(current > SPIKE_FACTOR * low)
            for start in range(0, len(candidates), BATCH_ROWS):
                idx = candidates[start : start + BATCH_ROWS]
                median = np.median(sliding_window_view(seq, SPIKE_WINDOW)[idx], axis=1)
                self._spikes += int(((median > 0) & (current[idx] > SPIKE_FACTOR * median)).sum())
        self._spike_prev = seq[-SPIKE_WINDOW:].copy()

    def _find_target(self, loss: np.ndarray) -> None:
        if self._to_target is not None or not np.isfinite(self._target):
            return
        seq = np.concatenate([self._ma_prev, loss])
        if len(seq) >= TARGET_WINDOW:
            with np.errstate(invalid="ignore", over="ignore"):
                mean = sliding_window_view(seq, TARGET_WINDOW).mean(axis=1)
            hits = np.flatnonzero(mean <= self._target)
            if hits.size:
                end_in_seq = int(hits[0]) + TARGET_WINDOW - 1
                self._to_target = self._rows - len(self._ma_prev) + end_in_seq + 1
        self._ma_prev = seq[-(TARGET_WINDOW - 1) :].copy()

    def result(self) -> dict[str, float]:
        step_ms = np.concatenate(self._step_ms) if self._step_ms else np.empty(0)
        grad = np.concatenate(self._grad) if self._grad else np.empty(0)
        nan = float("nan")
        # one partition for all three order statistics of the gradient norm
        grad_q = [float(q) for q in np.quantile(grad, [0.5, 0.9, 1.0])] if grad.size else [nan] * 3
        return {
            "step_rows": float(self._rows),
            "first_step": nan if self._first_step is None else float(self._first_step),
            "last_step": nan if self._last_step is None else float(self._last_step),
            "nonfinite_steps": float(self._bad),
            "finite_steps": float(self._rows - self._bad),
            "skipped_steps": float(self._skipped),
            "clipped_steps": float(self._clipped),
            "first_nonfinite_step_seen": nan if self._first_bad is None else float(self._first_bad),
            "loss_spikes": float(self._spikes),
            "steps_to_target": nan if self._to_target is None else float(self._to_target),
            "final_loss_steps": self._final_sum / self._final_n if self._final_n else nan,
            "start_loss_steps": self._start_sum / self._start_n if self._start_n else nan,
            "median_step_ms": float(np.median(step_ms)) if step_ms.size else nan,
            "median_grad_norm": grad_q[0],
            "p90_grad_norm": grad_q[1],
            "max_grad_norm": grad_q[2],
        }


def _batch_arrays(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """Columns as numpy with nulls made explicit; absent columns get neutral values."""
    n = batch.num_rows
    names = set(batch.schema.names)
    out: dict[str, np.ndarray] = {}
    for name in STEP_COLUMNS:
        if name not in names:
            out[name] = np.zeros(n, bool) if name in _BOOL_COLUMNS else np.full(n, np.nan)
            continue
        col = batch.column(name)
        if name in _BOOL_COLUMNS:
            out[name] = pc.fill_null(col.cast(pa.bool_()), False).to_numpy(zero_copy_only=False)
        elif name == "step":
            out[name] = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
        else:
            out[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return out


class _TrialFiles:
    """One trial's step files, each opened once for both its row count and its data.

    Opening a ``ParquetFile`` directly (rather than through a dataset per
    trial) halves the per-file cost, which dominates a sweep of short trials.
    """

    def __init__(self, loc: SweepLocation, paths: list[str]) -> None:
        self.files = [pq.ParquetFile(loc.fs.open_input_file(p)) for p in paths]
        self.num_rows = sum(f.metadata.num_rows for f in self.files)

    def batches(self, columns: tuple[str, ...] = STEP_COLUMNS) -> Iterator[pa.RecordBatch]:
        for f in self.files:
            present = [c for c in columns if c in f.schema_arrow.names]
            yield from f.iter_batches(batch_size=BATCH_ROWS, columns=present)

    def close(self) -> None:
        for f in self.files:
            f.close()


def _sorted_batches(files: _TrialFiles) -> Iterator[pa.RecordBatch]:
    """Fallback for out-of-order or duplicated steps: one trial, sorted, last write wins."""
    frames = [pa.Table.from_batches([b]).to_pandas() for b in files.batches()]
    frames = [f for f in frames if len(f)]
    if not frames:
        return
    frame = pd.concat(frames, ignore_index=True)
    frame = frame.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    yield from table.to_batches(max_chunksize=BATCH_ROWS)


def _aggregate_trial(files: _TrialFiles, target: float) -> dict[str, float]:
    acc = TrialAccumulator(files.num_rows, target)
    for batch in files.batches():
        if not acc.update(_batch_arrays(batch)):
            sorted_batches = list(_sorted_batches(files))
            acc = TrialAccumulator(sum(b.num_rows for b in sorted_batches), target)
            for sorted_batch in sorted_batches:
                acc.update(_batch_arrays(sorted_batch))
            break
    return acc.result()


#: Batches decoded ahead of the fold, per scan. Bounds the read-ahead memory
#: to a few batches while letting decoding (pyarrow, no GIL) overlap the fold.
PREFETCH_BATCHES = 8
_END = object()


def _prefetched(
    loc: SweepLocation, order: list[tuple[str, list[str]]]
) -> Iterator[tuple[str, int, dict[str, np.ndarray] | None]]:
    """Yield ``(trial_id, n_rows, arrays)`` per batch and ``(trial_id, n_rows, None)``
    at the end of each trial, decoded by a background thread.

    A sweep of many short trials is dominated by opening and decoding files;
    doing that in a thread while the main thread folds the previous batches
    roughly halves the wall time on two cores. Errors in the thread are
    re-raised here; leaving the loop early stops the thread.
    """
    out: queue.Queue = queue.Queue(maxsize=PREFETCH_BATCHES)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for trial_id, paths in order:
                files = _TrialFiles(loc, paths)
                try:
                    for batch in files.batches():
                        if not put((trial_id, files.num_rows, _batch_arrays(batch))):
                            return
                finally:
                    files.close()
                if not put((trial_id, files.num_rows, None)):
                    return
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises
            put(exc)

    thread = threading.Thread(target=produce, name="ampsweep-steps-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def aggregate_steps(sweep_dir: str | Path, targets: Mapping[str, float]) -> pd.DataFrame:
    """Scan ``steps/`` for the given trials and return one row of scores each.

    ``targets`` maps each trial id to scan onto its target loss (NaN = none);
    its keys are the trials to read, so callers decide what counts (committed
    rows) and debris is skipped by construction. Trials with no step data get
    a row of NaN so a partial sweep still lines up with the trials table.
    """
    loc = resolve(sweep_dir)
    grouped = files_by_trial(loc, "steps", set(targets))
    order = [(tid, grouped[tid]) for tid in targets if tid in grouped]
    found: dict[str, dict[str, float]] = {}
    acc: TrialAccumulator | None = None
    in_order = True
    for trial_id, n_rows, arrays in _prefetched(loc, order):
        if acc is None:
            acc, in_order = TrialAccumulator(n_rows, float(targets[trial_id])), True
        if arrays is not None:
            in_order = in_order and acc.update(arrays)
            continue
        if in_order:
            found[trial_id] = acc.result()
        else:  # out-of-order or repeated steps: this trial again, sorted
            files = _TrialFiles(loc, grouped[trial_id])
            try:
                found[trial_id] = _aggregate_trial(files, float(targets[trial_id]))
            finally:
                files.close()
        acc = None
    nan_row = {name: float("nan") for name in STEP_SCORE_COLUMNS}
    rows = [{"trial_id": tid, **found.get(tid, nan_row)} for tid in targets]
    frame = pd.DataFrame(rows, columns=["trial_id", *STEP_SCORE_COLUMNS])
    return frame.astype({"trial_id": "str", **{name: "float64" for name in STEP_SCORE_COLUMNS}})


def read_trial_tables(
    sweep_dir: str | Path, sub: str, trial_ids: list[str], columns: tuple[str, ...]
) -> dict[str, pd.DataFrame]:
    """The given columns of a few trials' ``steps/`` or ``layers/`` rows, for figures.

    Only the named trials are opened, so drawing curves for a handful of
    configurations costs the same on a sweep of any size.
    """
    loc = resolve(sweep_dir)
    out: dict[str, pd.DataFrame] = {}
    for trial_id, paths in files_by_trial(loc, sub, set(trial_ids)).items():
        files = _TrialFiles(loc, paths)
        try:
            batches = list(files.batches(columns))
        finally:
            files.close()
        if batches:
            tables = [pa.Table.from_batches([b]) for b in batches]
            frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
            if sub == "steps" and "step" in frame.columns:
                frame = frame.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
            out[trial_id] = frame.reset_index(drop=True)
    return out
