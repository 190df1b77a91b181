"""Parquet layout: pinned schemas, atomic commits, debris replaced, readable by pyarrow and pandas."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from ampsweep.contracts import ANOMALIES_SCHEMA, COLUMN_DOCS, LAYERS_SCHEMA, STEPS_SCHEMA, TRIALS_SCHEMA
from ampsweep.jobs import TrialConfig, TrialResult
from ampsweep.jobs.training._trainer import run_trial
from ampsweep.sweep import SweepStore

PINNED = {
    "trials": [
        ("trial_id", "string"),
        ("sweep", "string"),
        ("workload", "string"),
        ("graph_id", "string"),
        ("amp_level", "string"),
        ("black_list", "list<item: string>"),
        ("loss_placement", "string"),
        ("clip", "double"),
        ("loss_scale", "string"),
        ("dtype", "string"),
        ("seed", "int64"),
        ("steps", "int64"),
        ("outcome", "string"),
        ("steps_run", "int64"),
        ("first_nonfinite_step", "int64"),
        ("final_loss", "double"),
        ("target_loss", "double"),
        ("equivalent_to", "string"),
        ("copied_from", "string"),
        ("copy_reason", "string"),
        ("error", "string"),
        ("traceback", "string"),
        ("wall_s", "double"),
        ("compile_s", "double"),
        ("device_kind", "string"),
        ("node", "string"),
        ("device_id", "string"),
        ("worker_index", "int64"),
        ("attempts", "int64"),
        ("mindspore_version", "string"),
        ("device_target", "string"),
        ("finished_at", "timestamp[ms, tz=UTC]"),
        ("start_step", "int64"),
        ("start_from", "string"),
        ("zero_fraction", "double"),
        ("underflow_fraction", "double"),
        ("overflow_mode", "string"),
        ("started_at", "timestamp[ms, tz=UTC]"),
        ("diagnose_s", "double"),
        ("fp32_cells", "string"),
        ("fp32_params", "int64"),
        ("fp32_cell_paths", "list<item: string>"),
        ("devices", "int64"),
        ("global_batch", "int64"),
    ],
    "steps": [
        ("step", "int64"),
        ("loss", "double"),
        ("grad_norm", "double"),
        ("clipped", "bool"),
        ("nonfinite", "bool"),
        ("skipped", "bool"),
        ("loss_scale", "double"),
        ("step_ms", "double"),
    ],
    "layers": [
        ("step", "int64"),
        ("layer", "string"),
        ("grad_norm", "double"),
        ("grad_absmax", "double"),
        ("nonfinite", "int64"),
        ("zero_fraction", "double"),
        ("underflow_fraction", "double"),
    ],
    "anomalies": [
        ("kind", "string"),
        ("replay_step", "int64"),
        ("cell", "string"),
        ("cell_class", "string"),
        ("phase", "string"),
        ("input_dtype", "string"),
        ("output_dtype", "string"),
        ("max_abs", "double"),
        ("fp32_max_abs", "double"),
        ("rel_error", "double"),
        ("zero_fraction", "double"),
        ("note", "string"),
        ("input_max_abs", "double"),
        ("inner_op", "string"),
        ("inner_max_abs", "double"),
        ("intermediate_max_abs", "double"),
        ("finite", "bool"),
        ("rank", "int64"),
        ("ranks_broken", "int64"),
        ("cause", "string"),
        ("input_position", "int64"),
        ("input_index", "string"),
        ("attempt", "int64"),
        ("node", "string"),
        ("device_id", "string"),
    ],
}
SCHEMAS = {
    "trials": TRIALS_SCHEMA,
    "steps": STEPS_SCHEMA,
    "layers": LAYERS_SCHEMA,
    "anomalies": ANOMALIES_SCHEMA,
}


@pytest.mark.parametrize("table", sorted(PINNED))
def test_schema_is_pinned_and_documented(table):
    schema = SCHEMAS[table]
    assert [(f.name, str(f.type)) for f in schema] == PINNED[table]
    # the docs' schema tables are generated from the schemas and COLUMN_DOCS (docs/hooks.py)
    missing = [f.name for f in schema if not COLUMN_DOCS[table].get(f.name)]
    assert not missing, f"COLUMN_DOCS does not say what {table} columns {missing} mean"
    assert set(COLUMN_DOCS[table]) == set(schema.names), "a documented column the table does not have"


def _record(
    clip: float | None = 0.5, steps: int = 12, seed: int = 0, amp_level: str = "O0", sweep: str = "s"
) -> tuple[TrialConfig, TrialResult]:
    """A real short trial of the linear workload, as the actor hands it to the store."""
    config = TrialConfig(
        workload="tests.linear_workload:make",
        steps=steps,
        abort_after=3,
        amp_level=amp_level,
        black_list=(),
        clip=clip,
        loss_scale="none",
        dtype="float16",
        seed=seed,
        layer_every=5,
    )
    return config, run_trial(config, config.workload)


def test_round_trip_through_pyarrow_dataset_and_pandas(tmp_path):
    store = SweepStore(str(tmp_path), "s")
    records = [_record(seed=0)[1], _record(clip=None, seed=1)[1]]
    for record in records:
        store.commit(record)
    assert store.committed() == {r.trial_id for r in records}
    trials = ds.dataset(tmp_path / "s" / "trials", format="parquet").to_table()
    assert trials.schema.equals(TRIALS_SCHEMA)
    assert trials.num_rows == 2
    steps = ds.dataset(tmp_path / "s" / "steps", format="parquet", partitioning="hive").to_table().to_pandas()
    for trial_id, group in steps.groupby("trial_id"):
        assert sorted(group["step"]) == list(range(12)), trial_id
    frame = pd.read_parquet(tmp_path / "s" / "steps")
    assert len(frame) == 24 and set(frame["trial_id"].astype(str)) == store.committed()
    layers = (
        ds.dataset(tmp_path / "s" / "layers", format="parquet", partitioning="hive").to_table().to_pandas()
    )
    one = layers[layers["trial_id"] == records[0].trial_id]
    assert set(one["step"]) == {0, 5, 10}, "sampled every layer_every (5) steps"
    assert set(one["layer"]) == {"weight"}


def test_committed_files_carry_no_column_statistics(tmp_path):
    """Each file is one trial, read whole: statistics would only add bytes (a fifth of them)."""
    import pyarrow.parquet as pq

    store = SweepStore(str(tmp_path), "s")
    store.commit(_record(seed=0)[1])
    files = sorted((tmp_path / "s").rglob("*.parquet"))
    assert {f.relative_to(tmp_path / "s").parts[0] for f in files} >= {"trials", "steps", "layers"}
    for file in files:
        meta = pq.ParquetFile(file).metadata
        columns = [
            meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)
        ]
        assert not any(column.is_stats_set for column in columns), file


def test_debris_of_an_interrupted_trial_is_ignored_and_replaced(tmp_path):
    store = SweepStore(str(tmp_path), "s")
    _, record = _record()
    debris = tmp_path / "s" / "steps" / f"trial_id={record.trial_id}"
    debris.mkdir(parents=True)
    (debris / "part-0.parquet").write_bytes(b"half a file")
    (tmp_path / "s" / "trials").mkdir()
    (tmp_path / "s" / "trials" / f".tmp-123-{record.trial_id}.parquet").write_bytes(b"x")
    assert store.committed() == set(), "only a trials/ row makes a trial done"
    store.commit(record)
    assert store.committed() == {record.trial_id}
    table = ds.dataset(tmp_path / "s" / "steps", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 12


def test_a_failed_write_leaves_no_trials_row(tmp_path, monkeypatch):
    store = SweepStore(str(tmp_path), "s")
    _, record = _record()
    real = store.write_table

    def fail_on_layers(path, table):
        if "/layers/" in path:
            raise OSError("disk full")
        real(path, table)

    monkeypatch.setattr(store, "write_table", fail_on_layers)
    with pytest.raises(OSError):
        store.commit(record)
    assert store.committed() == set()


def test_store_accepts_a_file_uri(tmp_path):
    store = SweepStore(f"file://{tmp_path}", "s")
    _, record = _record()
    store.commit(record)
    assert (tmp_path / "s" / "trials" / f"{record.trial_id}.parquet").is_file()
    assert isinstance(ds.dataset(tmp_path / "s" / "trials").to_table(), pa.Table)


def test_a_nested_sweep_folder_forks_from_the_snapshots_of_its_parent(tmp_path):
    # the adaptive search's confirmation round lives in OUT/<name>/confirm and reuses OUT/_snapshots
    from ampsweep.sweep.store._store import SweepStore

    top = SweepStore(str(tmp_path), "search")
    top.write_snapshot("prefix-abc", b"state")
    nested = SweepStore(top.root, "confirm", top.snapshot_folder)
    assert nested.read_snapshot("prefix-abc") == b"state"
    assert SweepStore(top.root, "confirm").read_snapshot("prefix-abc") is None
    assert (tmp_path / "_snapshots" / "prefix-abc.ckpt").read_bytes() == b"state"
