"""Assemble the analysis and write the report folder.

``report/`` holds ``ranking.csv`` (every configuration, fixed columns),
``report.md`` (recommendation, evidence, ranking, failures, rules),
``report.html`` (the same plus figures, one self-contained file) and
``recommendation.json`` (the recommendation as data, schema in
:mod:`analysis._recommendation`). Files are written to a temporary name and
renamed into place, as everything else in a sweep folder is, so a reader
never sees half a report.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import _rank
from ._configs import config_scores, first_line
from ._evidence import STATUS_NO_TRIALS, STATUS_RECOMMENDED, kind_recommendation
from ._html import render_html
from ._load import SweepInventory, inventory, load_trials, resolve
from ._rank import clip_text
from ._recommendation import recommendation_json
from ._scores import Fp32Reference, fp32_reference, trial_scores
from ._steps import first_nonfinite_layers
from ._text import counts_items, ranking_cells, rules_notes, rules_text

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
class KindAnalysis:
    """Ranking and recommendation for one device kind.

    Numerics differ between backends (an Ascend float16 matmul is not a GPU
    one), so configurations are only compared with others, and with FP32, on
    the same device kind.
    """

    device_kind: str
    ranking: pd.DataFrame
    reference: Fp32Reference
    #: the ``recommendations[]`` entry of ``recommendation.json``
    recommendation: dict[str, Any]

    @property
    def recommended(self) -> pd.Series | None:
        if self.ranking.empty or not self.ranking["recommended"].any():
            return None
        return self.ranking[self.ranking["recommended"]].iloc[0]


@dataclass
class SweepAnalysis:
    """Everything the report needs, computed once, for callers that want more than files."""

    name: str
    sweep_dir: str
    scores: pd.DataFrame
    #: all kinds' rankings, one after the other; ``rank`` restarts per kind
    ranking: pd.DataFrame
    #: the FP32 reference over the whole sweep (per kind: ``kinds[i].reference``)
    reference: Fp32Reference
    inventory: SweepInventory
    kinds: list[KindAnalysis] = field(default_factory=list)

    @property
    def recommended(self) -> pd.Series | None:
        """The first kind's recommendation (the only one on a single-kind sweep)."""
        for kind in self.kinds:
            if kind.recommended is not None:
                return kind.recommended
        return None


def _sweep_name(trials: pd.DataFrame, fallback: str) -> str:
    names = trials["sweep"].dropna()
    return str(names.mode().iloc[0]) if len(names) else fallback


def _rank_kind(kind: str, scores: pd.DataFrame, layers: dict[str, str]) -> KindAnalysis:
    reference = fp32_reference(scores)
    ranking = _rank.rank_configs(config_scores(scores, layers), reference)
    return KindAnalysis(
        device_kind=kind,
        ranking=ranking,
        reference=reference,
        recommendation=kind_recommendation(ranking, scores),
    )


def analyze(sweep_dir: str | Path) -> SweepAnalysis:
    """Load, score, aggregate and rank a sweep folder (local path or URI), per device kind."""
    loc = resolve(sweep_dir)
    trials = load_trials(sweep_dir)
    inv = inventory(sweep_dir, trials["trial_id"])
    scores = trial_scores(sweep_dir, trials)
    unstable_ids = list(scores.loc[scores["ranked"] & scores["unstable"], "trial_id"])
    layers = first_nonfinite_layers(sweep_dir, unstable_ids) if unstable_ids else {}
    ranked = scores[scores["ranked"]]
    kinds = [
        _rank_kind(str(kind), scores[scores["device_kind"] == kind], layers)
        for kind in sorted(set(ranked["device_kind"]))
    ]
    rankings = [k.ranking for k in kinds if not k.ranking.empty]
    if rankings:
        ranking = pd.concat(rankings, ignore_index=True)
    else:
        ranking = _rank.rank_configs(config_scores(scores, layers), fp32_reference(scores))
    return SweepAnalysis(
        name=_sweep_name(trials, loc.name),
        sweep_dir=str(sweep_dir),
        scores=scores,
        ranking=ranking,
        reference=fp32_reference(scores),
        inventory=inv,
        kinds=kinds,
    )


def top_configs(source: str | Path | SweepAnalysis | pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` ranked configurations (per device kind), with the columns a terminal table needs."""
    if isinstance(source, SweepAnalysis):
        ranking = source.ranking
    elif isinstance(source, pd.DataFrame):
        ranking = source
    else:
        ranking = analyze(source).ranking
    columns = [c for c in TOP_COLUMNS if c in ranking.columns]
    if "device_kind" in ranking.columns and ranking["device_kind"].nunique() > 1:
        # each device kind is ranked on its own: its first n rows, kind after kind
        ranking = ranking.groupby("device_kind", sort=False).head(n)
    else:
        ranking = ranking.head(n)
    return ranking.loc[:, columns].reset_index(drop=True)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a shared report from its readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _md(value: object) -> str:
    """A table cell or inline text: pipes and newlines would break the Markdown table."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _counts_section(a: SweepAnalysis) -> list[str]:
    return ["## Trials", "", *[f"- {_md(item)}" for item in counts_items(a)], ""]


def _title(base: str, kind: KindAnalysis, many: bool) -> str:
    return f"## {base} (device kind: {kind.device_kind or 'unknown'})" if many else f"## {base}"


def _bullets(items: list[str]) -> list[str]:
    return [f"- {_md(item)}" for item in items]


def _code_blocks(code: dict[str, str] | None) -> list[str]:
    if not code:
        return []
    return [
        "**Code: a hand-written training step**",
        "",
        "```python",
        code["train_step"],
        "```",
        "",
        "**Code: with `mindspore.train.Model`**",
        "",
        "```python",
        code["model"],
        "```",
        "",
    ]


def _recommendation_section(kind: KindAnalysis, many: bool) -> list[str]:
    rec = kind.recommendation
    lines = [_title("Recommendation", kind, many), ""]
    if rec["status"] == STATUS_NO_TRIALS:
        return lines + [rec["text"], ""]
    if rec["status"] == STATUS_RECOMMENDED:
        lines += [rec["text"], "", "**Evidence**", "", *_bullets(rec["evidence"]["statements"]), ""]
        if rec["undecided"]:
            lines += ["**What this sweep could not decide**", "", *_bullets(rec["undecided"]), ""]
        lines += _code_blocks(rec["code"])
        lines += [f"Why it ranks first: {_md(rec['rule'])}.", ""]
        return lines
    lines += [
        "**No mixed-precision configuration was stable on every seed and as good as FP32.** "
        + rec["text"].split(". ", 1)[1],
        "",
        *_bullets(rec["evidence"]["statements"]),
        "",
    ]
    if rec["code"]:
        lines += _code_blocks(rec["code"])
    lines += ["What to try next:", "", *_bullets(rec["next_steps"]), ""]
    if rec["undecided"]:
        lines += ["What this sweep did not cover:", "", *_bullets(rec["undecided"]), ""]
    return lines


def _ranking_table(kind: KindAnalysis, many: bool) -> list[str]:
    headers, rows = ranking_cells(kind.ranking)
    lines = [
        _title("Ranking", kind, many),
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
    ]
    for cells in rows:
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
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
            f"- `{row['trial_id']}` {row['amp_level']} bl={_md(row['black_list_key'])} "
            f"clip={clip_text(row['clip'])} seed {row['seed']}: "
            f"`{_md(first_line(row['error']) or 'no error message recorded')}`"
        )
    if len(diverged):
        lines += ["", f"Diverged trials: {len(diverged)}", ""]
        for _, row in diverged.head(50).iterrows():
            step = row["first_nonfinite"]
            lines.append(
                f"- `{row['trial_id']}` {row['amp_level']} bl={_md(row['black_list_key'])} seed {row['seed']}: "
                f"first non-finite step {'-' if pd.isna(step) else int(step)}"
            )
        if len(diverged) > 50:
            lines.append(f"- ... and {len(diverged) - 50} more (see `trials/`)")
    return lines + [""]


def _rules_section() -> list[str]:
    lines = ["## How the ranking is decided", ""]
    lines += [f"{i}. {text}" for i, text in enumerate(rules_text(), start=1)]
    lines.append("")
    for note in rules_notes():
        lines += [note, ""]
    return lines


def render_markdown(a: SweepAnalysis) -> str:
    """The report as Markdown: recommendation first, then the evidence."""
    lines = [f"# ampsweep report: {_md(a.name)}", ""]
    lines += _counts_section(a)
    many = len(a.kinds) > 1
    if not a.kinds:
        lines += ["## Recommendation", "", "Nothing to recommend: no committed trial could be ranked.", ""]
    for kind in a.kinds:
        lines += _recommendation_section(kind, many)
        if not kind.ranking.empty:
            lines += _ranking_table(kind, many)
    lines += _failures_section(a)
    lines += _rules_section()
    lines += [
        "Figures (loss curves, gradient norm against the clip thresholds, divergence map, per-layer "
        "gradient maxima) are in `report.html`; the recommendation as data is in `recommendation.json`.",
        "",
    ]
    return "\n".join(lines)


def ranking_csv(ranking: pd.DataFrame) -> str:
    """The ranking as CSV text with a fixed column order (stable for scripts)."""
    frame = ranking.reindex(columns=list(RANKING_COLUMNS))
    return frame.to_csv(index=False, lineterminator="\n")


def write_report(
    sweep_dir: str | Path, out_dir: str | Path | None = None, analysis: SweepAnalysis | None = None
) -> Path:
    """Write ``ranking.csv``, ``report.md``, ``report.html`` and
    ``recommendation.json``; return the path of ``report.md``.

    ``out_dir`` defaults to ``<sweep_dir>/report``; pass one when the sweep
    folder is a URI or read-only. ``analysis`` reuses an ``analyze`` result
    already in hand instead of reading the sweep again.
    """
    if out_dir is None and "://" in str(sweep_dir):
        raise ValueError(f"{sweep_dir} is a URI: pass out_dir, a local folder for the report")
    if analysis is None:
        analysis = analyze(sweep_dir)
    target = Path(out_dir) if out_dir is not None else Path(resolve(sweep_dir).root) / "report"
    _atomic_write(target / "ranking.csv", ranking_csv(analysis.ranking))
    _atomic_write(target / "recommendation.json", recommendation_json(analysis))
    _atomic_write(target / "report.html", render_html(analysis))
    report = target / "report.md"
    _atomic_write(report, render_markdown(analysis))
    return report
