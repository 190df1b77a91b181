"""``ampsweep profile SPEC`` (``docs/cli.md``): which Cells float16 will hurt, before a sweep is paid for.

``ampsweep.jobs.profiling`` measures; this module picks the start as the sweep's trials would and
renders a table of at most 100 columns, or one JSON object on the last line of stdout.
"""

from __future__ import annotations

import json
from pathlib import Path

from ampsweep.contracts import FLOAT16_MAX, num, pct
from ampsweep.jobs import CellProfile, Profile, profile

from ._api import Sweep

#: the widest line the table may print (a terminal, a pasted issue)
WIDTH = 100
_CLASS_WIDTH, _CELL_WIDTH = 28, 24


def profile_sweep(sweep: Sweep, steps: int | None = None, snapshots: Path | None = None) -> Profile:
    """Profile the spec's workload on its first seed, from where its trials start (a prefix found in
    ``snapshots``, an ``OUT/_snapshots`` folder, is loaded instead of trained again)."""
    spec = sweep.spec
    seed = spec.grid.seed[0]
    point = sweep.workload.starts.for_seed(seed)
    prefix, start_step, checkpoint = 0, 0, None
    saved = snapshots / f"{point.snapshot}.ckpt" if snapshots is not None and point is not None else None
    if point is not None and saved is not None and saved.is_file():
        start_step, checkpoint = point.step, saved.read_bytes()
    elif point is not None and point.prefix is not None:
        prefix = point.step
    elif point is not None and point.checkpoint is not None:
        start_step, checkpoint = point.step, Path(point.checkpoint).read_bytes()
    return profile(
        sweep.workload_ref,
        seed,
        steps or spec.steps,
        dict(spec.workload_args),
        prefix_steps=prefix,
        start_step=start_step,
        checkpoint=checkpoint,
    )


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _row(cls: str, cell: str, forward: str, backward: str, share: str, risk: str) -> str:
    return (
        f"{_fit(cls, _CLASS_WIDTH):<{_CLASS_WIDTH}} {_fit(cell, _CELL_WIDTH):<{_CELL_WIDTH}} "
        f"{forward:>11} {backward:>12} {share:>9}  {risk}"
    )


def _classes(cells: list[CellProfile], risk: str) -> list[str]:
    return list(dict.fromkeys(c.cell_class for c in cells if c.risk == risk))


def _few(names: list[str], shown: int = 3) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _loss_scale_text(result: Profile) -> str:
    """What loss scaling to use, and why."""
    over, under = _classes(result.cells, "overflow"), _classes(result.cells, "underflow")
    scale = result.loss_scale
    if scale == "dynamic":
        return (
            f"loss scale: dynamic (gradients underflow in {_few(under, 2)}; "
            f"values overflow in {_few(over, 2)})"
        )
    if scale is not None:
        return f"loss scale: {scale} (gradients below float16's 2^-24 in {_few(under, 2)})"
    if over:
        return (
            "loss scale: none (scaling does not prevent an overflow; keep it in FP32: "
            f"black_list: [{', '.join(over)}])"
        )
    return "loss scale: none needed"


def render(name: str, result: Profile) -> list[str]:
    """The human report: what ran, the table (riskiest first), the loss scale, the extrapolations."""
    last = result.start_step + result.steps - 1
    lines = [
        _fit(
            f"{name}: FP32 profile of steps {result.start_step:,}-{last:,} "
            f"({len(result.sampled)} sampled; maxima include the ops inside each Cell)",
            WIDTH,
        ),
        _row("class", "cell", "forward max", "backward max", "underflow", "risk"),
    ]
    for cell in result.cells:
        lines.append(
            _row(
                cell.cell_class,
                cell.cell,
                num(cell.forward_max),
                num(cell.backward_max),
                pct(cell.underflow_fraction),
                cell.risk or "-",
            )
        )
    lines.append(_fit(_loss_scale_text(result), WIDTH))
    for cell in result.cells:
        if cell.passes_max_at is not None:
            lines.append(
                _fit(
                    f"{cell.cell_class} ({cell.cell}): values grow; they pass {FLOAT16_MAX:.0f} "
                    f"near step {cell.passes_max_at:,}",
                    WIDTH,
                )
            )
    if result.nonfinite_step is not None:
        lines.append(f"note: FP32 itself was not finite at step {result.nonfinite_step:,}")
    return lines


def as_json_line(result: Profile) -> str:
    """The JSON object ``--json`` prints: one line, strict JSON (no NaN or Infinity)."""
    return json.dumps(result.as_json(), allow_nan=False, separators=(",", ":"))
