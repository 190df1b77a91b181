"""A workload that cannot be imported or built: exit 2 and one line that says what happened.

Nothing was disallowed in these cases, so the line must not say "is not allowed"
(that wording is for a value the spec may not hold); it names the file and the
exception, as Python would have.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from ampsweep.sweep.cli import main

#: (id, the workload file's text, the factory the spec names, words the one line must hold)
CASES = [
    (
        "syntax-error",
        "def make(seed):\n    return (\n\nx = = 1\n",
        "make",
        ["importing '", "syn.py' failed: SyntaxError: ", "(syn.py, line "],
    ),
    (
        "missing-factory",
        "def build(seed):\n    return None\n",
        "make",
        ["syn.py' has no callable 'make'"],
    ),
    (
        "factory-raises",
        "def make(seed):\n    raise FileNotFoundError('no dataset under /data/train')\n",
        "make",
        ["calling '", "syn.py:make' failed: FileNotFoundError: no dataset under /data/train"],
    ),
]


@pytest.mark.parametrize(("source", "factory", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
# ``run`` checks the workload while a local Ray starts (seconds on 2 cores): ``make test-slow``;
# tests/test_bad_specs.py keeps one such refusal in the fast suite
@pytest.mark.parametrize("command", ["plan", pytest.param("run", marks=pytest.mark.slow)])
def test_a_workload_that_fails_says_what_happened_in_one_line(
    tmp_path: Path, capsys, write_spec, command, source, factory, words
):
    (tmp_path / "syn.py").write_text(source)
    spec = write_spec({"workload": f"{tmp_path / 'syn.py'}:{factory}"})
    out = tmp_path / "out"
    argv = [command, str(spec)] + (["--out", str(out), "--no-progress"] if command == "run" else [])
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("ampsweep: error: workload: "), lines[0]
    assert "not allowed" not in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in captured.err
    assert not out.exists(), "nothing is written"
    assert not ray.is_initialized()


def test_a_refused_reference_still_says_what_is_allowed(tmp_path: Path, capsys, write_spec):
    """Validation failures keep "is not allowed; <what is>": a reference of the wrong form."""
    code = main(["plan", str(write_spec({"workload": "my_model"}))])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("ampsweep: error: workload: 'my_model' is not allowed; "), lines[0]


def test_a_trial_that_raises_a_framed_message_keeps_its_news_in_the_error_column(tmp_path: Path) -> None:
    """MindSpore opens many messages with a rule of dashes and a ``- Section:`` header: the error
    column holds the first line that says something, not the rule."""
    from ampsweep.contracts import FP32_LEVEL
    from ampsweep.jobs.training._trainer import run_trial
    from tests._trial import trial_config

    tiny = Path(__file__).parent / "workloads" / "tiny_mlp.py"
    framed = "-" * 52 + "\n- Framework Error Message:\n" + "-" * 52 + "\nThe all-reduce timed out after 600 s"
    (tmp_path / "framed.py").write_text(
        "import dataclasses, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('tiny_for_framed', {str(tiny)!r})\n"
        "tiny = importlib.util.module_from_spec(spec); spec.loader.exec_module(tiny)\n"
        "def _breaking(batches):\n"
        "    for index, batch in enumerate(batches):\n"
        f"        if index == 2: raise RuntimeError({framed!r})\n"
        "        yield batch\n"
        "def make(seed):\n"
        "    workload = tiny.make(seed)\n"
        "    return dataclasses.replace(workload, batches=_breaking(workload.batches))\n"
    )
    config = trial_config(workload=f"{tmp_path / 'framed.py'}:make", steps=5, amp_level=FP32_LEVEL)
    result = run_trial(config, config.workload)
    assert result.outcome == "failed"
    assert result.error == "RuntimeError: The all-reduce timed out after 600 s"
