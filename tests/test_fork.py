"""``start_from``: trials fork from an FP32 prefix or the user's checkpoint, with global steps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
import yaml

from ampsweep.contracts import PREFIX_SNAPSHOT, SNAPSHOT_FOLDER
from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._snapshot import Snapshots, checkpoint_bytes, read_checkpoint
from ampsweep.jobs.training._trainer import run_trial
from ampsweep.sweep import Sweep
from ampsweep.sweep.cli import main
from tests._trial import trial_config

TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"
TINY_REF = f"{TINY}:make"


def _losses(result) -> dict[int, float]:
    table = result.steps.to_pydict()
    return dict(zip(table["step"], table["loss"]))


def fp32_of(steps: int, **changes) -> TrialConfig:
    return dataclasses.replace(
        trial_config(workload=TINY_REF, steps=steps, amp_level="O0", black_list=(), clip=None), **changes
    )


def test_a_forked_trial_continues_the_from_zero_run_at_global_steps():
    """FP32 for 30 steps, snapshot, 20 more: the same losses as 50 steps from zero (FACTS: bit for bit)."""
    whole = run_trial(fp32_of(50), TINY_REF)
    prefix = run_trial(fp32_of(30, save_snapshot=True), TINY_REF)
    assert prefix.snapshot, "an FP32 prefix hands back its state"
    start = read_checkpoint(prefix.snapshot)
    forked = run_trial(fp32_of(20, start_step=30, start_from="snap-test"), TINY_REF, start=start)
    assert forked.outcome == "completed", forked.error
    got, want = _losses(forked), _losses(whole)
    assert sorted(got) == list(range(30, 50)), "steps are global: the first forked step is 30"
    np.testing.assert_allclose([got[s] for s in range(30, 50)], [want[s] for s in range(30, 50)], rtol=1e-6)
    row = forked.trial_row(sweep="s", equivalent_to=None, attempts=1).to_pylist()[0]
    assert (row["start_step"], row["start_from"]) == (30, "snap-test")


def test_trials_forked_in_one_process_all_start_from_the_snapshot():
    """A worker keeps the snapshot it read for its next trial: training must not write into it."""
    prefix = run_trial(fp32_of(30, save_snapshot=True), TINY_REF)
    snapshots = Snapshots()  # the worker's: each trial gets the decoded parameters as an argument
    start = snapshots.read("snap-shared", prefix.snapshot)
    first = run_trial(fp32_of(20, start_step=30, start_from="snap-shared", clip=0.5), TINY_REF, start=start)
    start = snapshots.read("snap-shared", prefix.snapshot)
    assert start is snapshots.read("snap-shared", b"not read again")
    again = run_trial(fp32_of(20, start_step=30, start_from="snap-shared", clip=0.5), TINY_REF, start=start)
    assert _losses(first) == _losses(again)


def test_the_start_is_part_of_the_trial_id_and_nothing_changes_without_it():
    plain = fp32_of(20)
    assert dataclasses.replace(plain, start_step=0, start_from=None).trial_id == plain.trial_id
    forked = dataclasses.replace(plain, start_step=30, start_from="prefix-aaa")
    other = dataclasses.replace(plain, start_step=30, start_from="prefix-bbb")
    assert len({plain.trial_id, forked.trial_id, other.trial_id}) == 3
    assert forked.graph_id == plain.graph_id, "a fork reuses the compiled graph"


def _spec(tmp_path: Path, **extra) -> Path:
    spec = {
        "name": "fork",
        "workload": TINY_REF,
        "steps": 20,
        "grid": {"amp_level": ["O0", "O2"], "seed": [0, 1]},
        **extra,
    }
    path = tmp_path / "fork.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_plan_lists_the_prefix_runs_and_their_cost(tmp_path, capsys):
    assert main(["plan", str(_spec(tmp_path, start_from={"steps": 30}))]) == 0
    out = capsys.readouterr().out
    assert "trials start at step 30 from an FP32 prefix: 4 trials x 20 steps = 80 steps" in out
    assert "prefix: 2 FP32 runs of 30 steps (one per seed) = 60 steps" in out
    sweep = Sweep.from_yaml(_spec(tmp_path, start_from={"steps": 30}))
    plan = sweep.plan()
    assert {t.start_step for t in plan.trials} == {30}
    assert {t.start_from for t in plan.trials} == set(plan.starts) and len(plan.starts) == 2
    assert all(s.startswith(PREFIX_SNAPSHOT) for s in plan.starts)
    assert sorted(p.seed for p in plan.prefixes) == [0, 1] and all(p.amp_level == "O0" for p in plan.prefixes)


def _checkpoint(tmp_path: Path, hidden: int, drop: str | None = None, extra: str | None = None) -> Path:
    """A checkpoint as ModelCheckpoint writes it: network parameters and Adam-free SGD state."""
    from tests.workloads.tiny_mlp import make

    workload = make(seed=0, hidden=hidden)
    named = {p.name: p for p in workload.network.get_parameters()}
    optimizer = workload.optimizer(workload.network.trainable_params())
    named.update({p.name: p for _, p in optimizer.parameters_and_names()})
    if drop:
        named.pop(drop)
    if extra:
        named[extra] = named["fc1.bias"]
    import mindspore as ms

    named["global_step"] = ms.Parameter(ms.Tensor(np.array([40], np.int32)), name="global_step")
    path = tmp_path / f"user-{hidden}-{drop}-{extra}.ckpt"
    path.write_bytes(checkpoint_bytes(named))
    return path


def test_the_users_checkpoint_starts_at_its_global_step(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path, hidden=16)
    assert main(["plan", str(_spec(tmp_path, start_from={"checkpoint": ckpt.name}))]) == 0
    assert "trials start at step 40 from checkpoint" in capsys.readouterr().out
    assert main(["plan", str(_spec(tmp_path, start_from={"checkpoint": str(ckpt), "step": 7}))]) == 0
    assert "trials start at step 7" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ({"hidden": 32}, "wrong shape fc1.bias (checkpoint [32], workload [16])"),
        # each case starts a local Ray for the check (seconds on 2 cores): one stays in the fast suite
        pytest.param({"hidden": 16, "drop": "fc2.weight"}, "missing fc2.weight", marks=pytest.mark.slow),
        pytest.param(
            {"hidden": 16, "extra": "encoder.weight"}, "unexpected encoder.weight", marks=pytest.mark.slow
        ),
    ],
)
def test_a_checkpoint_that_does_not_fit_exits_2_and_writes_nothing(tmp_path, capsys, kind, words):
    ckpt = _checkpoint(tmp_path, **kind)
    out = tmp_path / "out"
    code = main(["run", str(_spec(tmp_path, start_from={"checkpoint": str(ckpt)})), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("ampsweep: error: start_from.checkpoint:") and words in err[0], err[0]
    assert not out.exists()


def test_a_checkpoint_that_is_not_one_exits_2(tmp_path, capsys):
    bogus = tmp_path / "notes.ckpt"
    bogus.write_text("not a checkpoint")
    assert main(["plan", str(_spec(tmp_path, start_from={"checkpoint": str(bogus)}))]) == 2
    assert "a MindSpore checkpoint" in capsys.readouterr().err
    assert main(["plan", str(_spec(tmp_path, start_from={"checkpoint": "missing.ckpt"}))]) == 2
    assert "exists" in capsys.readouterr().err


@pytest.mark.slow
def test_a_forked_sweep_runs_its_prefix_once_and_resume_reuses_it(tmp_path):
    from ampsweep.sweep import RunConfig

    spec = _spec(tmp_path, start_from={"steps": 30}, localize=True)
    out = tmp_path / "out"
    result = Sweep.from_yaml(spec).run(out, RunConfig(workers=2, progress=False))
    assert result.ran == 4
    snapshots = sorted((out / SNAPSHOT_FOLDER).glob("*.ckpt"))
    assert len(snapshots) == 2
    stamps = [p.stat().st_mtime_ns for p in snapshots]
    steps = ds.dataset(out / "fork" / "steps", format="parquet", partitioning="hive").to_table(
        columns=["step"]
    )
    assert min(steps.column("step").to_pylist()) == 30
    # a second sweep with the same prefix (another name, same OUT) reuses the snapshots
    again = yaml.safe_load(spec.read_text()) | {"name": "fork-again"}
    second = Sweep(again, base_dir=tmp_path).run(out, RunConfig(workers=2, progress=False))
    assert second.ran == 4
    assert [p.stat().st_mtime_ns for p in snapshots] == stamps, "no prefix ran again"
