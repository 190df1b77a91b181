"""``ampsweep profile``: one FP32 run with hooks names the Cell float16 will hurt, and a loss scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ampsweep.contracts import static_scale_for
from ampsweep.jobs import CellProfile, Profile
from ampsweep.jobs.profiling._profile import EXTRAPOLATE_FROM, passes_max_at, sample_steps
from ampsweep.sweep.cli import main

ATTENTION = Path(__file__).parent / "workloads" / "attention_overflow.py"


def _spec(tmp_path: Path, **fields: object) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "profiled", **fields}))
    return path


def _profile_json(capsys: pytest.CaptureFixture[str], spec: Path, *flags: str) -> dict:
    assert main(["profile", str(spec), "--json", *flags]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    return json.loads(last)


def _by_risk(result: dict, risk: str) -> set[str]:
    return {cell["class"] for cell in result["cells"] if cell["risk"] == risk}


def test_a_tiny_weighted_loss_is_underflow_and_gets_a_static_scale(tmp_path, capsys):
    spec = _spec(tmp_path, workload="ampsweep.jobs.workloads.tiny_loss:make", steps=300)
    result = _profile_json(capsys, spec, "--steps", "8")
    assert result["steps"] == 8 and result["start_step"] == 0
    assert {"WeightedLoss", "Dense"} <= _by_risk(result, "underflow")
    assert not _by_risk(result, "overflow")
    assert result["loss_scale"].startswith("static:")
    for cell in result["cells"]:
        assert set(cell) >= {"cell", "class", "forward_max", "backward_max", "underflow_fraction", "risk"}


@pytest.mark.parametrize("style", ["function", "method", "primitive"])
def test_an_overflow_inside_a_softmax_names_the_softmax_not_dense(tmp_path, capsys, style):
    spec = _spec(tmp_path, workload=f"{ATTENTION}:make", workload_args={"style": style}, steps=50)
    result = _profile_json(capsys, spec, "--steps", "4")
    assert _by_risk(result, "overflow") == {"NaiveSoftmax"}
    softmax = next(c for c in result["cells"] if c["class"] == "NaiveSoftmax")
    assert softmax["forward_max"] > 65504  # exp inside it, though its output stays <= 1
    dense = [c for c in result["cells"] if c["class"] == "Dense"]
    assert dense and all(c["risk"] is None and c["forward_max"] < 100 for c in dense)
    assert result["loss_scale"] is None


def test_the_table_fits_100_columns_and_says_what_to_do(tmp_path, capsys):
    spec = _spec(tmp_path, workload=f"{ATTENTION}:make", steps=3)
    assert main(["profile", str(spec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("profiled: FP32 profile of steps 0-2")
    assert lines[1].split()[:2] == ["class", "cell"]
    assert lines[2].split()[0] == "NaiveSoftmax" and lines[2].split()[-1] == "overflow"
    assert any(line.startswith("loss scale: none") and "NaiveSoftmax" in line for line in lines)
    assert all(len(line) <= 100 for line in lines)


def test_start_from_steps_profiles_after_the_fp32_prefix(tmp_path, capsys):
    spec = _spec(
        tmp_path, workload="ampsweep.jobs.workloads.tiny_loss:make", steps=300, start_from={"steps": 20}
    )
    result = _profile_json(capsys, spec, "--steps", "3")
    assert result["start_step"] == 20 and result["steps"] == 3


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"workload": "ampsweep.jobs.workloads.tiny_loss:make", "steps": 0}, "steps"),
        ({"workload": "no/such/file.py:make", "steps": 5}, "workload"),
        ({"workload": "ampsweep.jobs.workloads.tiny_loss:make", "steps": 5, "bogus": 1}, "bogus"),
    ],
)
def test_a_bad_spec_exits_2_with_one_line(tmp_path, capsys, fields, needle):
    assert main(["profile", str(_spec(tmp_path, **fields)), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and needle in captured.err


def test_bad_steps_flag_exits_2(tmp_path, capsys):
    spec = _spec(tmp_path, workload="ampsweep.jobs.workloads.tiny_loss:make", steps=5)
    with pytest.raises(SystemExit) as exit_:
        main(["profile", str(spec), "--steps", "0"])
    assert exit_.value.code == 2


def test_samples_are_spread_and_include_both_ends():
    assert sample_steps(1000, 16)[0] == 0 and sample_steps(1000, 16)[-1] == 999
    assert len(sample_steps(1000, 16)) == 16
    assert sample_steps(3, 16) == [0, 1, 2]


def test_growth_is_extrapolated_to_65504_only_when_it_grows_and_is_near():
    growing = [(step, 1000.0 * 2 ** (step / 100)) for step in range(0, 400, 25)]
    crossing = passes_max_at(growing, horizon=4000)
    assert crossing == 603  # 1000 * 2^(s/100) = 65504 at s = 100 * log2(65.504)
    assert passes_max_at(growing, horizon=500) is None  # too far ahead to claim
    assert passes_max_at([(s, 5000.0) for s in range(0, 400, 25)], horizon=4000) is None  # flat
    small = [(s, EXTRAPOLATE_FROM / 100 * 2 ** (s / 100)) for s in range(0, 400, 25)]
    assert passes_max_at(small, horizon=10**6) is None  # logits early on: not a forecast
    # one sample already past 65504 (the maximum the profile shows), the last ones below it again
    peaked = [*growing[:8], (200, 70000.0), *[(225 + 25 * k, 20000.0 * 1.15**k) for k in range(7)]]
    assert passes_max_at(peaked, horizon=4000) is None


def _cell(risk_values: dict) -> CellProfile:
    return CellProfile("c", "Cls", **risk_values)


def test_the_loss_scale_follows_the_risks():
    under = _cell({"backward_max": 1e-8, "grad_values": 10, "grad_tiny": 9})
    over = _cell({"forward_max": 40000.0})
    calm = _cell({"forward_max": 3.0, "backward_max": 0.1, "grad_values": 10, "grad_tiny": 1})
    assert (under.risk, over.risk, calm.risk) == ("underflow", "overflow", None)
    # the largest gradient seen (calm's 0.1) sets the scale: it must not overflow after scaling
    assert Profile([under, calm], 0, 1, [0]).loss_scale == static_scale_for(0.1) == "static:262144"
    assert Profile([over, calm], 0, 1, [0]).loss_scale is None
    assert Profile([under, over], 0, 1, [0]).loss_scale == "dynamic"
    assert Profile([calm], 0, 1, [0]).loss_scale is None


@pytest.mark.slow
def test_late_softmax_is_seen_coming_before_it_breaks(tmp_path, capsys):
    """``ExpSoftmax``'s exp passes 32752 in FP32 within the steps where O2 turns NaN (~1,400-1,600)."""
    spec = _spec(tmp_path, workload="ampsweep.jobs.workloads.late_softmax:make", steps=1500)
    result = _profile_json(capsys, spec)
    assert _by_risk(result, "overflow") == {"ExpSoftmax"}
    assert result["loss_scale"] is None


def test_a_run_writes_the_profile_only_for_a_cpu_sweep(tmp_path, capsys):
    # on a GPU/NPU sweep the driver's CPU would run it: the user is told the command instead
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ampsweep.contracts import PROFILE_FILE
    from ampsweep.sweep import Sweep
    from ampsweep.sweep.cli import _write_profile

    spec = _spec(tmp_path, workload="ampsweep.jobs.workloads.tiny_loss:make", steps=8)
    sweep = Sweep.from_yaml(spec)
    for kind, expect_file in (("gpu", False), ("cpu", True)):
        root = tmp_path / kind
        (root / "trials").mkdir(parents=True)
        pq.write_table(pa.table({"device_kind": [kind]}), root / "trials" / "t.parquet")
        _write_profile(sweep, root, str(spec))
        assert (root / PROFILE_FILE).exists() is expect_file
    assert f"ampsweep profile {spec}" in capsys.readouterr().out


@pytest.mark.slow
def test_a_worker_s_profile_runs_on_its_compiled_fp32_graph_and_finds_the_same(monkeypatch):
    from ampsweep.jobs import TrialConfig
    from ampsweep.jobs.profiling._profile import profile
    from ampsweep.jobs.training._step import CompiledStep, GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    mlp = f"{Path(__file__).resolve().parents[1] / 'benchmarks' / 'mlp_workload.py'}:make"
    fp32 = TrialConfig(
        workload=mlp, steps=60, abort_after=60, amp_level="O0", black_list=(), clip=None,
        loss_scale="none", dtype="float16", seed=0, localize=False,
    )  # fmt: skip
    graphs = GraphCache()
    run_trial(fp32, mlp, None, graphs)
    own_compile = profile(mlp, 0, 60, {})
    with monkeypatch.context() as patch:  # no compile of its own, and no silent fallback to one

        def compiles(*args):
            raise AssertionError("the profile compiled a graph of its own")

        patch.setattr(CompiledStep, "__init__", compiles)
        on_graph = profile(mlp, 0, 60, {}, graphs=graphs)
    assert on_graph.as_json() == own_compile.as_json()
