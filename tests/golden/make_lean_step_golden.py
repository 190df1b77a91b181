"""Regenerate ``lean_step.json``: the tables of three seeded trials, as the trainer wrote them.

The golden file was generated from the trainer *before* the lean step (commit
16e10ea, where every step computed the per-parameter statistics) with::

    .venv/bin/python -m tests.golden.make_lean_step_golden

Rerunning it against today's trainer only proves that the trainer agrees with
itself; the file is evidence because it came from the old code. It keeps the
``steps`` table (without ``step_ms``, a timing) and the ``layers`` rows of the
sampled steps (``step % layer_every == 0``), the rows the lean step still writes.
"""

from __future__ import annotations

import json
from pathlib import Path

GOLDEN = Path(__file__).with_name("lean_step.json")


def main() -> None:
    from ampsweep.jobs.training._trainer import run_trial
    from tests.test_lean_step import TRIALS, table_values

    golden = {}
    for name, config in TRIALS.items():
        result = run_trial(config, config.workload)
        golden[name] = {"outcome": str(result.outcome.value), **table_values(result, config.layer_every)}
        print(name, result.outcome, result.steps_run, len(golden[name]["layers"]["step"]))
    GOLDEN.write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
