"""The report's sections, built once as plain blocks that every renderer only formats.

Text is plain (unescaped); text between backticks is code in every renderer.
The order is the report's: the answer first (the change to make, the
localized layer with its evidence, the divergence map), then the evidence,
the ranking, the trial counts, failures and the rules.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ampsweep.contracts import FP32_LEVEL, PREFIX_SNAPSHOT, Configuration, black_list_value, num, pct

from .._model import STATUS_NO_TRIALS, STATUS_RECOMMENDED, KindAnalysis, SweepAnalysis
from ..compute._configs import first_line
from ..compute._criteria import TIE_RULE, rules_text
from ..compute._fp32_break import BROKE_AT
from ..compute._heatmap import divergence_grids
from ..compute._steps import SPIKE_FACTOR, SPIKE_WINDOW
from ._blocks import Block, Bullets, Code, Figure, Paragraph, Section, Table
from ._captions import FAILURE_CAPTION, HEATMAP_CAPTION
from ._localization import localization_phrase, trial_label
from ._profile import profile_section
from ._search import search_section

RANKING_HEADERS = (
    "#",
    "configuration",
    "seeds",
    "clip rate",
    "steps to target",
    "final loss",
    "speed vs FP32",
    "vs the row above",
    "what it is",
)


def ranking_table(ranking: pd.DataFrame) -> Table:
    """One row per configuration; the rank says when it is tied with the row above.

    The configuration is its honest label (``label``: "FP32" for O0), and a
    configuration with a diverged seed shows where it broke in place of its
    convergence figures (``broke_at``; :mod:`analysis.wording._labels`).
    """
    rows, roles = [], []
    for r in ranking.to_dict("records"):
        flag = " (recommended)" if r["recommended"] else (" (FP32 baseline)" if r["baseline"] else "")
        tied = f" (= #{int(r['rank']) - 1})" if r.get("tied_with_above") else ""
        what = str(r["description"])
        if r.get("broke_at"):
            to_target, final = str(r["broke_at"]), "-"
        else:
            steps = r["steps_to_target_median"]
            to_target, final = "-" if pd.isna(steps) else f"{steps:.0f}", num(r["final_loss_median"])
        rows.append(
            (
                f"{r['rank']}{tied}{flag}",
                str(r["label"]),
                str(r["outcome_text"]),
                pct(r["clip_rate_median"]),
                to_target,
                final,
                "-" if pd.isna(r["speed_vs_fp32_median"]) else f"{r['speed_vs_fp32_median']:.2f}x",
                str(r["phrase"]),
                what,
            )
        )
        roles.append("recommended" if r["recommended"] else ("baseline" if r["baseline"] else ""))
    return Table(RANKING_HEADERS, tuple(rows), tuple(roles), role="ranking")


def divergence_tables(ranking: pd.DataFrame) -> Table | None:
    """The divergence map as one table (panels stacked, their title in the first column)."""
    grids = divergence_grids(ranking)
    if not grids:
        return None
    many = len(grids) > 1
    headers = (("panel",) if many else ()) + ("AMP, black list", *grids[0].columns)
    rows = tuple(
        ((g.title,) if many else ()) + (label, *cells) for g in grids for label, cells in zip(g.rows, g.cells)
    )
    return Table(headers, rows, role="divergence")


#: Equivalent trials listed by name in the reports; the rest are counted.
EQUIVALENT_EXAMPLES = 3


def _as_run(row: dict) -> str:
    """An equivalent trial's name, with the black list it carried where its name leaves it out (under O0)."""
    name = Configuration.from_row(row).name()
    if row["amp_level"] == FP32_LEVEL and len(row["black_list"]):
        name += f" with black list {black_list_value(row['black_list'])}"
    return name


def equivalents_summary(scores: pd.DataFrame) -> tuple[int, list[str]]:
    """How many trials were not counted twice, and a few of them as examples."""
    dup = scores[~scores["ranked"]]
    examples = [
        f"{row['trial_id']} ({_as_run(row)}) = {row['equivalent_to']}"
        for row in dup.head(EQUIVALENT_EXAMPLES).to_dict("records")
    ]
    return len(dup), examples


def start_sentence(scores: pd.DataFrame) -> str | None:
    """Where the trials started (``start_from``), in one sentence; None when every one started at 0."""
    if "start_step" not in scores or not (scores["start_step"].fillna(0) > 0).any():
        return None
    forked = scores[scores["start_step"].fillna(0) > 0]
    steps = sorted({int(s) for s in forked["start_step"]})
    at = f"step {steps[0]:,}" if len(steps) == 1 else "steps " + ", ".join(f"{s:,}" for s in steps)
    snapshots = forked["start_from"].dropna().unique()
    seeds = forked["seed"].nunique()
    if all(str(s).startswith(PREFIX_SNAPSHOT) for s in snapshots):
        source = (
            f"an FP32 prefix ({len(snapshots)}, one per seed)"
            if len(snapshots) == seeds
            else "an FP32 prefix"
        )
    elif len(snapshots) == 1:
        source = "the user's checkpoint"
    else:
        source = f"{len(snapshots)} checkpoints"
    return f"trials start at {at} from {source}; steps are global, so a forked trial's first step is {steps[0]:,}"


def counts_items(a: SweepAnalysis) -> list[str]:
    """The "Trials" list: what was committed, expected, ignored, and the FP32 reference."""
    inv = a.inventory
    scores = a.scores
    outcome = scores["outcome"].value_counts()
    items = []
    start = start_sentence(scores)
    if start:
        items.append(start)
    if not inv.has_trials_dir:
        items.append("No `trials/` folder: no trial has been committed yet.")
    not_applicable = int(outcome.get("not_applicable", 0))
    items.append(
        f"committed: {len(scores)} (completed {int(outcome.get('completed', 0))}, "
        f"diverged {int(outcome.get('diverged', 0))}, failed {int(outcome.get('failed', 0))}"
        + (f", not applicable {not_applicable}" if not_applicable else "")
        + ")"
    )
    if inv.expected_trials is None:
        items.append("expected: unknown (no readable `plan.json`), so missing trials cannot be counted")
    else:
        items.append(f"expected from `plan.json`: {inv.expected_trials}; missing: {inv.missing_trials}")
    for trial_id, where in sorted(inv.unreadable.items()):
        items.append(
            f"unreadable, skipped: trial {trial_id}: {where}; `ampsweep run` with the same spec reruns it"
        )
    if inv.debris_ids:
        items.append(
            f"step data without a `trials/` row (interrupted or still running, ignored): {len(inv.debris_ids)}"
        )
    if not inv.has_steps_dir:
        items.append(
            "No `steps/` folder: per-step scores are unavailable; ranking uses outcomes and trial rows only."
        )
    elif inv.trials_without_steps:
        shown = ", ".join(inv.trials_without_steps[:10])
        more = "" if len(inv.trials_without_steps) <= 10 else ", ..."
        items.append(f"committed trials without step data: {len(inv.trials_without_steps)} ({shown}{more})")
    n_dup, examples = equivalents_summary(scores)
    if n_dup:
        shown = "; ".join(examples)
        more = f"; and {n_dup - len(examples)} more" if n_dup > len(examples) else ""
        items.append(
            f"equivalent configurations not counted twice: {n_dup} (e.g. a black list under O0, which casts "
            f"nothing), such as {shown}{more}; all are in `trials/`, column `equivalent_to`"
        )
    kinds = a.kinds or []
    if len(kinds) > 1:
        items.append(
            f"device kinds: {', '.join(k.device_kind or '(unknown)' for k in kinds)}; numerics differ between "
            "backends, so each kind is ranked on its own against its own FP32 baseline"
        )
    for kind in kinds:
        if not kind.speed_decides:
            where = f" on {kind.device_kind}" if len(kinds) > 1 else ""
            items.append(
                f"step times{where} were measured on CPU (float16 is emulated): shown, never decisive"
            )
    judged = fp32_break_sentence(scores)
    if judged:
        items.append(judged)
    refs = [(k.device_kind, k.reference) for k in kinds] or [("", a.reference)]
    for kind_name, ref in refs:
        where = f" on {kind_name}" if len(kinds) > 1 else ""
        if np.isfinite(ref.final_loss):
            items.append(
                f"FP32 reference{where}: {ref.n_trials} O0 trials, median final loss {num(ref.final_loss)}"
            )
        else:
            items.append(
                f"FP32 reference{where}: none (no finite O0 trial), so no relative target or silent-failure check"
            )
    return items


def fp32_break_sentence(scores: pd.DataFrame) -> str | None:
    """Which seeds' trials are judged against FP32 only before FP32 broke, in one sentence; None if none."""
    if BROKE_AT not in scores.columns or not scores[BROKE_AT].notna().any():
        return None
    broke = scores[scores[BROKE_AT].notna()].drop_duplicates("seed").sort_values("seed", kind="stable")
    at = ", ".join(
        f"seed {'unknown' if pd.isna(seed) else int(seed)} at step {int(step):,}"
        for seed, step in zip(broke["seed"], broke[BROKE_AT])
    )
    return (
        f"FP32 broke ({at}): on those seeds every trial is judged against FP32 only on its steps before that "
        "step (learns like FP32, final loss, steps to target)"
    )


def _localized(kind: KindAnalysis) -> Paragraph | None:
    rec = kind.recommendation
    loc = rec.localization
    if loc is None:
        return None
    text = localization_phrase(loc)
    if loc.config_id:
        # the configuration it was seen in, by the name the ranking shows it under
        names = dict(zip(kind.ranking["config_id"], kind.ranking["label"])) if len(kind.ranking) else {}
        text += f" (in {names.get(loc.config_id, loc.config_id)})"
    if rec.config and loc.cell_class in rec.config["black_list"]:
        text += f"; this change keeps {loc.cell_class} in float32"
    return Paragraph(text, lead="Localized layer:")


#: figures placed in the answer section; the "Figures" section shows the rest
PLACED_FIGURES = ("divergence", "failure")


def failure_file(index: int) -> str:
    """The failure figure's PNG beside report.md, one per device kind."""
    return "failure.png" if index == 0 else f"failure-{index}.png"


def _failure(kind: KindAnalysis, index: int) -> Figure | None:
    if kind.figures is None or kind.figures.failure is None:
        return None
    return Figure(index, ("failure",), FAILURE_CAPTION, file=failure_file(index))


def _code_blocks(code: dict[str, str] | None) -> list[Block]:
    if not code:
        return []
    blocks: list[Block] = [
        Code("A hand-written training step", code["train_step"]),
        Code("With `mindspore.train.Model`", code["model"]),
    ]
    if "amp_level=" in code["model"]:  # the snippet casts the network itself (MODEL_AMP_LEVEL_NOTE)
        blocks.append(
            Paragraph(
                'Give `Model` no `amp_level`: the network is cast above. `Model(..., amp_level="O2")` would '
                "cast the whole network to float16 again, the layers kept in FP32 included, and on Ascend or "
                "GPU add a dynamic loss scale manager that this sweep did not use."
            )
        )
    return blocks


def _answer(kind: KindAnalysis, index: int, suffix: str) -> Section:
    rec = kind.recommendation
    section = Section(f"Recommendation{suffix}")
    if rec.status == STATUS_NO_TRIALS:
        section.blocks.append(Paragraph(rec.headline, role="verdict none"))
        return section
    # the answer lines first (the change, why, how sure), then the answer in full
    lines = rec.answer or (rec.headline,)
    role = "verdict" if rec.status == STATUS_RECOMMENDED else "verdict none"
    section.blocks.append(Paragraph(lines[0], role=role))
    section.blocks += [Paragraph(line) for line in lines[1:]]
    if rec.status == STATUS_RECOMMENDED:
        section.blocks.append(Paragraph(rec.headline, lead="In full:"))
    else:
        section.blocks.append(Paragraph(rec.detail, lead=rec.headline))
    for block in (_localized(kind),):
        if block is not None:
            section.blocks.append(block)
    if rec.loss_placement:
        section.blocks.append(Paragraph(f"`{rec.loss_placement}`", lead="Loss placement:"))
    if rec.notes:
        section.blocks.append(Bullets(tuple(rec.notes)))
    failure = _failure(kind, index)
    if failure is not None:
        section.blocks.append(failure)
    if not kind.ranking.empty:
        section.blocks.append(
            Figure(index, ("divergence",), HEATMAP_CAPTION, fallback=divergence_tables(kind.ranking))
        )
    return section


def _evidence(kind: KindAnalysis, suffix: str) -> list[Section]:
    rec = kind.recommendation
    if rec.status == STATUS_NO_TRIALS:
        return []
    out = [Section(f"Evidence{suffix}", 3, [Bullets(tuple(rec.evidence["statements"]))])]
    if rec.status == STATUS_RECOMMENDED:
        if rec.undecided:
            out.append(Section("What this sweep could not decide", 3, [Bullets(tuple(rec.undecided))]))
        out.append(Section("Code", 3, _code_blocks(rec.code)))
        out[-1].blocks.append(Paragraph(f"Why it ranks first: {rec.rule}."))
        return out
    if rec.code and rec.fp32_break is None:  # FP32 broke too: its code is no fallback
        out.append(Section("Code (FP32)", 3, _code_blocks(rec.code)))
    out.append(Section("What to try next", 3, [Bullets(tuple(rec.next_steps))]))
    if rec.undecided:
        out.append(Section("What this sweep did not cover", 3, [Bullets(tuple(rec.undecided))]))
    return out


def _failures(a: SweepAnalysis) -> Section:
    scores = a.scores
    failed = scores[scores["outcome"] == "failed"]
    diverged = scores[scores["outcome"] == "diverged"]
    section = Section("Failures")
    items = [
        f"`{row['trial_id']}` {trial_label(row)}: `{first_line(row['error']) or 'no error message recorded'}`"
        for row in failed.to_dict("records")
    ]
    section.blocks.append(Bullets(tuple(items)) if items else Paragraph("No trial failed with an exception."))
    if len(diverged):
        rows = [
            f"`{row['trial_id']}` {trial_label(row)}: first non-finite step "
            + ("-" if pd.isna(row["first_nonfinite"]) else str(int(row["first_nonfinite"])))
            for row in diverged.head(50).to_dict("records")
        ]
        if len(diverged) > 50:
            rows.append(f"... and {len(diverged) - 50} more (see `trials/`)")
        section.blocks += [Paragraph(f"Diverged trials: {len(diverged)}"), Bullets(tuple(rows))]
    return section


def report_sections(a: SweepAnalysis) -> list[Section]:
    """Every section of the report, in order (the title is the renderer's)."""
    sections: list[Section] = []
    many = len(a.kinds) > 1
    if not a.kinds:
        sections.append(
            Section(
                "Recommendation",
                blocks=[
                    Paragraph(
                        "Nothing to recommend: no committed trial could be ranked.", role="verdict none"
                    )
                ],
            )
        )
    for index, kind in enumerate(a.kinds):
        suffix = f" (device kind: {kind.device_kind or 'unknown'})" if many else ""
        sections.append(_answer(kind, index, suffix))
        if index == 0 and a.search is not None:
            sections.append(search_section(a.search))
        sections += _evidence(kind, suffix)
        if not kind.ranking.empty:
            sections.append(Section(f"Ranking{suffix}", blocks=[ranking_table(kind.ranking)]))
            sections.append(
                Section(
                    f"Figures{suffix}",
                    blocks=[
                        Figure(
                            index,
                            (),
                            fallback=Paragraph(
                                "Figures (loss curves, gradient norm against the clip thresholds, per-layer "
                                "gradient maxima) are in `report.html`; the recommendation as data is in "
                                "`recommendation.json`."
                            ),
                        )
                    ],
                )
            )
    if a.profile is not None:
        sections.append(profile_section(a.profile))
    sections.append(Section("Trials", blocks=[Bullets(tuple(counts_items(a)))]))
    sections.append(_failures(a))
    rules = Section("How the ranking is decided", blocks=[Bullets(tuple(rules_text()), ordered=True)])
    rules.blocks += [
        Paragraph(TIE_RULE),
        Paragraph("Each device kind is ranked on its own, against the FP32 trials of the same kind."),
        Paragraph(
            f"Loss spikes (reported, not ranked): a finite loss above {SPIKE_FACTOR:g} x the median of the "
            f"previous {SPIKE_WINDOW} finite losses."
        ),
    ]
    sections.append(rules)
    return sections


def title(a: SweepAnalysis) -> str:
    return f"ampsweep report: {a.name}"
