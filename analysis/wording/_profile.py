"""The FP32 float16-headroom profile a sweep folder holds (``profile.json``), for the report.

``ampsweep run`` profiles one FP32 run of the workload after the trials
(``ampsweep profile``'s measurement); the report shows which Cells come near
float16's range, which gradients fall below it, and the loss scale that
implies. The file is read with the rest of the sweep
(:func:`analysis.compute._side_files.read_profile`); here it is only laid out.
"""

from __future__ import annotations

from typing import Any

from ampsweep.contracts import num, pct

from ._blocks import Bullets, Paragraph, Section, Table

#: Cells the report lists: every one at risk, and the largest others up to this many in all.
SHOWN = 8


def profile_section(found: dict[str, Any]) -> Section:
    """A report section: the riskiest Cells of the FP32 run against float16's range, and the loss scale."""
    cells = [c for c in found["cells"] if isinstance(c, dict)]
    risky = [c for c in cells if c.get("risk")]
    shown = risky + [c for c in cells if not c.get("risk")][: max(0, SHOWN - len(risky))]
    rows = tuple(
        (
            str(c.get("class", "")),
            str(c.get("cell", "")),
            num(c.get("forward_max")),
            num(c.get("backward_max")),
            pct(c.get("underflow_fraction")),
            str(c.get("risk") or "-"),
        )
        for c in shown
    )
    start, steps = int(found.get("start_step") or 0), int(found.get("steps") or 0)
    intro = (
        f"One FP32 run of the first seed, steps {start:,} to {start + steps - 1:,}, with hooks on every Cell "
        "(maxima include the ops inside each Cell). `overflow`: a value within 2x of 65504; `underflow`: a large "
        "share of gradient values below float16's smallest subnormal, 2^-24. The same as `ampsweep profile`."
    )
    notes = [f"loss scale this profile calls for: {found.get('loss_scale') or 'none'}"]
    notes += [
        f"{c.get('class')} (`{c.get('cell')}`) grows: it passes 65504 near step {int(c['passes_max_at']):,}"
        for c in cells
        if isinstance(c.get("passes_max_at"), (int, float))
    ]
    table = Table(("class", "cell", "forward max", "backward max", "gradients < 2^-24", "risk"), rows)
    return Section(
        "float16 headroom of the FP32 run", blocks=[Paragraph(intro), table, Bullets(tuple(notes))]
    )
