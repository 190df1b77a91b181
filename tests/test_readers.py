"""DuckDB and Polars read a sweep folder exactly as ampsweep's store writes it.

Why: the README tells users to query ``trials/``, ``steps/`` and ``layers/``
with their own tools, so the Parquet files written by the real pipeline
(``jobs._worker.to_record`` on a real MindSpore run, committed with
``sweep.SweepStore``) must read back with the partition column intact and
agree with what ``analysis`` computes from the same files.

The partition column is read as a string on purpose (``hive_types`` in
DuckDB, ``hive_schema`` in Polars): trial ids are hex digests, and one that
happens to be all digits would otherwise be inferred as an integer and lose
its leading zeros.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ampsweep import analysis
from ampsweep.sweep import SweepStore
from tests.test_store import _record as store_record

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

STEPS = 12


def _record(amp_level: str, clip: float | None, seed: int):
    return store_record(clip=clip, steps=STEPS, seed=seed, amp_level=amp_level, sweep="readers")[1]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("readers")
    store = SweepStore(str(out), "readers")
    for amp_level, clip, seed in (("O0", 0.5, 0), ("O0", None, 1), ("O2", 0.5, 0)):
        store.commit(_record(amp_level, clip, seed))
    return out / "readers"


def test_duckdb_reads_trials_and_steps(sweep_dir: Path) -> None:
    trials = duckdb.sql(
        f"select trial_id, amp_level, clip, black_list, seed, outcome, device_kind "
        f"from read_parquet('{sweep_dir}/trials/*.parquet') order by trial_id"
    ).fetchall()
    assert len(trials) == 3
    assert {t[1] for t in trials} == {"O0", "O2"}
    assert {t[2] for t in trials} == {0.5, None}  # clipping off is a null
    assert all(t[3] == [] and t[6] == "cpu" for t in trials)
    steps = duckdb.sql(
        f"""
        select trial_id, count(*) as n, min(step) as first, max(step) as last,
               sum(case when clipped and not nonfinite then 1 else 0 end) as clipped,
               sum(case when not nonfinite then 1 else 0 end) as finite
        from read_parquet('{sweep_dir}/steps/*/*.parquet', hive_partitioning = true,
                          hive_types = {{'trial_id': VARCHAR}})
        group by trial_id order by trial_id
        """
    ).fetchall()
    assert [s[0] for s in steps] == [t[0] for t in trials]
    assert all(s[1:4] == (STEPS, 0, STEPS - 1) for s in steps)
    # the same clip rate as the analysis computes from the same files
    scores = analysis.trial_scores(sweep_dir).set_index("trial_id")
    clipped_trials = [s for s in steps if pd.notna(scores.loc[s[0], "clip"])]
    assert len(clipped_trials) == 2
    for trial_id, _, _, _, clipped, finite in clipped_trials:
        assert scores.loc[trial_id, "clip_rate"] == pytest.approx(clipped / finite)
    joined = duckdb.sql(
        f"""
        select t.amp_level, count(*) from read_parquet('{sweep_dir}/trials/*.parquet') t
        join read_parquet('{sweep_dir}/steps/*/*.parquet', hive_partitioning = true,
                          hive_types = {{'trial_id': VARCHAR}}) s using (trial_id)
        group by t.amp_level order by t.amp_level
        """
    ).fetchall()
    assert joined == [("O0", 2 * STEPS), ("O2", STEPS)]


def test_duckdb_reads_layers(sweep_dir: Path) -> None:
    rows = duckdb.sql(
        f"select trial_id, layer, count(*) from read_parquet('{sweep_dir}/layers/*/*.parquet', "
        "hive_partitioning = true, hive_types = {'trial_id': VARCHAR}) group by all"
    ).fetchall()
    assert {r[1] for r in rows} == {"weight"} and len(rows) == 3


def test_polars_reads_trials_and_steps(sweep_dir: Path) -> None:
    trials = pl.scan_parquet(f"{sweep_dir}/trials/*.parquet").collect()
    assert trials.height == 3
    assert trials.schema["black_list"] == pl.List(pl.String)
    assert trials.schema["clip"] == pl.Float64 and trials["clip"].null_count() == 1
    steps = pl.scan_parquet(
        f"{sweep_dir}/steps/*/*.parquet", hive_partitioning=True, hive_schema={"trial_id": pl.String}
    )
    per_trial = (
        steps.group_by("trial_id")
        .agg(pl.len().alias("n"), pl.col("step").min().alias("first"), pl.col("loss").is_finite().all())
        .sort("trial_id")
        .collect()
    )
    assert per_trial["trial_id"].to_list() == sorted(trials["trial_id"].to_list())
    assert per_trial["n"].to_list() == [STEPS] * 3 and per_trial["first"].to_list() == [0] * 3
    joined = (
        steps.join(pl.scan_parquet(f"{sweep_dir}/trials/*.parquet"), on="trial_id")
        .group_by("amp_level")
        .agg(pl.len())
        .sort("amp_level")
        .collect()
    )
    assert joined.rows() == [("O0", 2 * STEPS), ("O2", STEPS)]
    assert steps.collect_schema()["clipped"] == pl.Boolean
