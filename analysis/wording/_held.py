"""How far the answer held, in words: the line after the answer, and what lies past it.

A sweep shorter than the user's training can recommend a configuration that
breaks later; the answer therefore always says up to which step it was run
and held, and whether that is the user's whole training (``horizon:``) or only
the sweep's own length.
"""

from __future__ import annotations

from .._model import HeldTo


def held_line(held: HeldTo) -> str | None:
    """'Held to step 1,800 (the horizon: ...) on 3/3 seeds, continued from its own snapshots at step 600; ...'.

    None without a horizon past the trials: the answer's own lines already
    say the seeds it was stable on, and "What this sweep could not decide"
    says that nothing ran past the sweep's length.
    """
    if held.horizon <= held.trials_end:
        return None
    seeds = f"on {held.seeds}/{held.total} seeds"
    if held.step >= held.horizon:
        text = (
            f"Held to step {held.horizon:,} (the horizon: your training's length) {seeds}, "
            f"continued from its own snapshots at step {held.trials_end:,}"
        )
    else:
        text = f"Held only to step {held.step:,} {seeds}: short of the horizon, step {held.horizon:,}"
    if held.broke:
        text += "; past the sweep's end " + "; ".join(held.broke)
    return text + "."


def past_the_horizon(held: HeldTo) -> list[str]:
    """What this sweep could not decide about the steps past what was run."""
    if held.horizon <= held.trials_end:
        return [
            f"whether the answer holds past step {held.trials_end:,}: nothing ran longer (no `horizon:` past it)"
        ]
    lines = [f"what happens past step {held.horizon:,}, the horizon: nothing ran longer"]
    if held.unchecked:
        named = ", ".join(held.unchecked[:3]) + (
            f" and {len(held.unchecked) - 3} more" if len(held.unchecked) > 3 else ""
        )
        lines.append(
            f"whether {named} would hold to step {held.horizon:,}: stable to step {held.trials_end:,}, "
            "not continued (they rank below the answer)"
        )
    return lines
