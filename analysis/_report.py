"""Assemble the analysis and write ``report/ranking.csv`` and ``report/report.md``.

Files are written to a temporary name and renamed into place, as everything
else in a sweep folder is, so a reader never sees half a report.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import _rank
from ._code import mindspore_snippet
from ._configs import config_scores, first_line
from ._load import SweepInventory, inventory, load_trials, resolve
from ._rank import clip_text
from ._scores import TARGET_FROM_FP32, Fp32Reference, fp32_reference, trial_scores
from ._steps import (
    FINAL_FRACTION,
    SPIKE_FACTOR,
    SPIKE_WINDOW,
    TARGET_WINDOW,
    first_nonfinite_layers,
)

#: Columns of ``ranking.csv``, in order: identity, verdict, evidence, rule.
RANKING_COLUMNS = (
    "rank",
    "recommended",
    "baseline",
    "stability",
    "amp_level",
    "black_list_key",
    "clip",
    "loss_scale",
    "dtype",
    "device_kind",
    "n_seeds",
    "n_trials",
    "n_completed",
    "n_diverged",
    "n_failed",
    "divergence_rate",
    "first_nonfinite_step_median",
    "clip_label",
    "clip_rate_median",
    "clip_rate_min",
    "clip_rate_max",
    "target_median",
    "n_reached_target",
    "steps_to_target_median",
    "steps_to_target_min",
    "steps_to_target_max",
    "final_loss_median",
    "final_loss_min",
    "final_loss_max",
    "speed_vs_fp32_median",
    "speed_vs_fp32_min",
    "speed_vs_fp32_max",
    "steps_per_s_median",
    "skipped_steps_median",
    "loss_spikes_median",
    "n_black_listed",
    "config_id",
    "trial_ids",
    "rule",
)

#: What :func:`top_configs` shows: enough to choose, the rest is in the CSV.
TOP_COLUMNS = (
    "rank",
    "stability",
    "amp_level",
    "black_list_key",
    "clip",
    "loss_scale",
    "dtype",
    "device_kind",
    "n_seeds",
    "divergence_rate",
    "clip_rate_median",
    "steps_to_target_median",
    "final_loss_median",
    "speed_vs_fp32_median",
    "rule",
)


@dataclass
class SweepAnalysis:
    """Everything the report needs, computed once, for callers that want more than files."""

    name: str
    sweep_dir: str
    scores: pd.DataFrame
    ranking: pd.DataFrame
    reference: Fp32Reference
    inventory: SweepInventory

    @property
    def recommended(self) -> pd.Series | None:
        if self.ranking.empty or not self.ranking["recommended"].any():
            return None
        return self.ranking[self.ranking["recommended"]].iloc[0]


def _sweep_name(trials: pd.DataFrame, fallback: str) -> str:
    names = trials["sweep"].dropna()
    return str(names.mode().iloc[0]) if len(names) else fallback


def analyze(sweep_dir: str | Path) -> SweepAnalysis:
    """Load, score, aggregate and rank a sweep folder (local path or URI)."""
    loc = resolve(sweep_dir)
    trials = load_trials(sweep_dir)
    inv = inventory(sweep_dir, trials["trial_id"])
    scores = trial_scores(sweep_dir, trials)
    unstable_ids = list(scores.loc[scores["ranked"] & scores["unstable"], "trial_id"])
    layers = first_nonfinite_layers(sweep_dir, unstable_ids) if unstable_ids else {}
    reference = fp32_reference(scores)
    ranking = _rank.rank_configs(config_scores(scores, layers), reference)
    return SweepAnalysis(
        name=_sweep_name(trials, loc.name),
        sweep_dir=str(sweep_dir),
        scores=scores,
        ranking=ranking,
        reference=reference,
        inventory=inv,
    )


def top_configs(source: str | Path | SweepAnalysis | pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` ranked configurations, with the columns a terminal table needs."""
    if isinstance(source, SweepAnalysis):
        ranking = source.ranking
    elif isinstance(source, pd.DataFrame):
        ranking = source
    else:
        ranking = analyze(source).ranking
    columns = [c for c in TOP_COLUMNS if c in ranking.columns]
    return ranking.loc[:, columns].head(n).reset_index(drop=True)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cell(value: object, digits: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else ""
    if isinstance(value, (float, np.floating)):
        return format(float(value), digits)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _describe(row: pd.Series) -> str:
    """A configuration in words, for the recommendation sentence."""
    level = "FP32 (AMP level O0)" if row["amp_level"] == "O0" else f"AMP level {row['amp_level']}"
    bits = [f"{level} in {row['dtype']}"]
    if row["amp_level"] != "O0":
        bits.append(
            f"keeping {', '.join(row['black_list'])} in float32"
            if row["black_list"]
            else "with the default black list"
        )
    bits.append(
        "no gradient clipping" if pd.isna(row["clip"]) else f"clip by global norm at {float(row['clip'])!r}"
    )
    bits.append(f"loss scaling: {row['loss_scale']}")
    return ", ".join(bits) + f" (on {row['device_kind']})"


def _counts_section(a: SweepAnalysis) -> list[str]:
    inv = a.inventory
    scores = a.scores
    outcome = scores["outcome"].value_counts()
    lines = ["## Trials", ""]
    if not inv.has_trials_dir:
        lines.append("- No `trials/` folder: no trial has been committed yet.")
    lines.append(
        f"- committed: {len(scores)} (completed {int(outcome.get('completed', 0))}, "
        f"diverged {int(outcome.get('diverged', 0))}, failed {int(outcome.get('failed', 0))})"
    )
    if inv.expected_trials is None:
        lines.append("- expected: unknown (no readable `sweep.yaml`), so missing trials cannot be counted")
    else:
        lines.append(f"- expected from `sweep.yaml`: {inv.expected_trials}; missing: {inv.missing_trials}")
    if inv.debris_ids:
        lines.append(
            f"- step data without a `trials/` row (interrupted or still running, ignored): {len(inv.debris_ids)}"
        )
    if not inv.has_steps_dir:
        lines.append(
            "- No `steps/` folder: per-step scores are unavailable; ranking uses outcomes and trial rows only."
        )
    elif inv.trials_without_steps:
        shown = ", ".join(inv.trials_without_steps[:10])
        more = "" if len(inv.trials_without_steps) <= 10 else ", ..."
        lines.append(f"- committed trials without step data: {len(inv.trials_without_steps)} ({shown}{more})")
    dup = scores[~scores["ranked"]]
    if len(dup):
        lines.append(
            f"- equivalent configurations not counted twice: {len(dup)} "
            f"(e.g. a black list under O0, which casts nothing)"
        )
        for _, row in dup.head(20).iterrows():
            lines.append(
                f"  - `{row['trial_id']}` ({row['amp_level']} bl={row['black_list_key']}) = `{row['equivalent_to']}`"
            )
    if np.isfinite(a.reference.final_loss):
        lines.append(
            f"- FP32 reference: {a.reference.n_trials} O0 trials, median final loss {a.reference.final_loss:.3g}"
        )
    else:
        lines.append(
            "- FP32 reference: none (no finite O0 trial), so no relative target or silent-failure check"
        )
    return lines + [""]


def _next_steps(a: SweepAnalysis) -> list[str]:
    """Concrete next grid to try, from what this sweep did and did not cover."""
    ranking, scores = a.ranking, a.scores
    tips = []
    if set(scores["loss_scale"]) <= {"none", ""}:
        tips.append(
            "add loss scaling (`loss_scale: [dynamic]`): float16 gradients under- and overflow without it"
        )
    if "bfloat16" not in set(scores["dtype"]):
        tips.append(
            "try `dtype: [bfloat16]` where the device supports it: float32's exponent range, no overflow at 65504"
        )
    layers = sorted({t.split(" @ ")[0] for t in ranking.get("first_nonfinite_layers", []) if t})
    if layers:
        tips.append(f"black-list the layers whose gradients went non-finite first: {'; '.join(layers)}")
    if (ranking["tier"] == _rank.TIER_SILENT).any():
        tips.append(
            "finite-but-worse runs usually overflow a normalisation's variance or a softmax/exp: "
            "keep the normalisation and loss layers in float32"
        )
    if (ranking["clip_class"] == _rank.CLIP_TOO_SMALL).any():
        p90 = scores.loc[scores["reference"], "p90_grad_norm"].median()
        hint = f" (90th percentile of the FP32 pre-clip norm: {p90:.3g})" if np.isfinite(p90) else ""
        tips.append(f"raise the clip thresholds that fire on nearly every step{hint}")
    if "O1" not in set(scores["amp_level"]):
        tips.append("try `amp_level: [O1]`, which casts only matmul/conv-type layers")
    tips.append("run more steps or seeds if divergence is rare")
    return [f"- {t}" for t in tips]


def _recommendation_section(a: SweepAnalysis) -> list[str]:
    lines = ["## Recommendation", ""]
    best = a.recommended
    if best is not None:
        lines += [
            f"Use {_describe(best)}.",
            "",
            "```python",
            mindspore_snippet(best),
            "```",
            "",
            f"Why: {best['rule']}.",
            "",
        ]
        return lines
    if a.ranking.empty:
        return lines + ["Nothing to recommend: no committed trial could be ranked.", ""]
    lines += [
        "**No mixed-precision configuration was stable on every seed and as good as FP32.** "
        "Keep training in FP32 for now"
        + (" (below)." if (a.ranking["tier"] == _rank.TIER_FP32).any() else "."),
        "",
    ]
    fp32 = a.ranking[a.ranking["tier"] == _rank.TIER_FP32]
    if len(fp32):
        lines += ["```python", mindspore_snippet(fp32.iloc[0]), "```", ""]
    lines += ["What to try next:", "", *_next_steps(a), ""]
    return lines


def _ranking_table(ranking: pd.DataFrame) -> list[str]:
    headers = [
        "#",
        "AMP",
        "black list",
        "clip",
        "loss scale",
        "dtype",
        "device",
        "seeds",
        "diverged",
        "clip rate",
        "steps to target",
        "final loss",
        "speed vs FP32",
        "rule",
    ]
    lines = [
        "## Ranking",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
    ]
    for _, r in ranking.iterrows():
        flag = " (recommended)" if r["recommended"] else (" (FP32 baseline)" if r["baseline"] else "")
        cells = [
            f"{r['rank']}{flag}",
            r["amp_level"],
            r["black_list_key"],
            clip_text(r["clip"]),
            r["loss_scale"],
            r["dtype"],
            r["device_kind"],
            r["n_trials"],
            f"{r['n_diverged'] + r['n_failed']}/{r['n_trials']}",
            "-" if pd.isna(r["clip_rate_median"]) else f"{r['clip_rate_median'] * 100:.0f} %",
            _cell(r["steps_to_target_median"], ".0f"),
            _cell(r["final_loss_median"]),
            "-" if pd.isna(r["speed_vs_fp32_median"]) else f"{r['speed_vs_fp32_median']:.2f}x",
            r["rule"],
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines + [""]


def _failures_section(a: SweepAnalysis) -> list[str]:
    scores = a.scores
    failed = scores[scores["outcome"] == "failed"]
    diverged = scores[scores["outcome"] == "diverged"]
    lines = ["## Failures", ""]
    if failed.empty:
        lines.append("No trial failed with an exception.")
    for _, row in failed.iterrows():
        lines.append(
            f"- `{row['trial_id']}` {row['amp_level']} bl={row['black_list_key']} "
            f"clip={clip_text(row['clip'])} seed {row['seed']}: "
            f"`{first_line(row['error']) or 'no error message recorded'}`"
        )
    if len(diverged):
        lines += ["", f"Diverged trials: {len(diverged)}", ""]
        for _, row in diverged.head(50).iterrows():
            step = row["first_nonfinite"]
            lines.append(
                f"- `{row['trial_id']}` {row['amp_level']} bl={row['black_list_key']} seed {row['seed']}: "
                f"first non-finite step {'-' if pd.isna(step) else int(step)}"
            )
    return lines + [""]


def _rules_section() -> list[str]:
    return [
        "## How the ranking is decided",
        "",
        (
            "1. Stable mixed precision (no diverged or failed seed) first, then the FP32 baseline (O0, never "
            "recommended while a stable mixed-precision configuration exists), then silent failures (finite but "
            f"median final loss > {_rank.SILENT_LOSS_FACTOR:g} x FP32 + {_rank.SILENT_LOSS_MARGIN:g}, or never "
            "reaching the target while FP32 does), then configurations with diverged or failed seeds."
        ),
        "2. Fewer diverged or failed seeds.",
        (
            f"3. Clip rate (clipped / finite steps, median over seeds): in band (0, {_rank.HEALTHY_CLIP_MAX:g}] < "
            "no clipping < never fires < unknown < fires too often < above "
            f"{_rank.TOO_SMALL_CLIP:g} (threshold too small)."
        ),
        (
            f"4. Fewer steps to target: first step where the {TARGET_WINDOW}-step moving average of the loss is at "
            "or below the target (the workload's `target_loss`, else "
            f"{TARGET_FROM_FP32:g} x the FP32 final loss of the same seed); a seed that never gets there counts as "
            "infinitely slow."
        ),
        f"5. Lower final loss (mean finite loss over the last {FINAL_FRACTION:.0%} of steps).",
        "6. Higher speed vs FP32 (FP32 median step time / this median step time, same device kind).",
        "7. Fewer layer types kept in FP32.",
        "",
        (
            f"Loss spikes (reported, not ranked): a finite loss above {SPIKE_FACTOR:g} x the median of the previous "
            f"{SPIKE_WINDOW} finite losses."
        ),
        "",
    ]


def render_markdown(a: SweepAnalysis) -> str:
    """The report as Markdown: recommendation first, then the evidence."""
    lines = [f"# ampsweep report: {a.name}", ""]
    lines += _counts_section(a)
    lines += _recommendation_section(a)
    if not a.ranking.empty:
        lines += _ranking_table(a.ranking)
    lines += _failures_section(a)
    lines += _rules_section()
    return "\n".join(lines)


def ranking_csv(ranking: pd.DataFrame) -> str:
    """The ranking as CSV text with a fixed column order (stable for scripts)."""
    frame = ranking.reindex(columns=list(RANKING_COLUMNS))
    return frame.to_csv(index=False, lineterminator="\n")


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write ``ranking.csv`` and ``report.md`` and return the path of ``report.md``.

    ``out_dir`` defaults to ``<sweep_dir>/report``; pass one when the sweep
    folder is a URI or read-only.
    """
    if out_dir is None and "://" in str(sweep_dir):
        raise ValueError(f"{sweep_dir} is a URI: pass out_dir, a local folder for the report")
    analysis = analyze(sweep_dir)
    target = Path(out_dir) if out_dir is not None else Path(resolve(sweep_dir).root) / "report"
    _atomic_write(target / "ranking.csv", ranking_csv(analysis.ranking))
    report = target / "report.md"
    _atomic_write(report, render_markdown(analysis))
    return report
