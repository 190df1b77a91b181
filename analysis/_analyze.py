"""``analyze``: load, score, aggregate and rank a sweep folder into the model, then word it.

The only module that runs the whole analysis, every read included (the figures' data too): ``compute``
reads and computes, then ``wording`` adds the words every output shows. It writes nothing
(:mod:`analysis._writer` does).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ampsweep.contracts import HorizonLog

from ._model import KindAnalysis, Recommendation, SweepAnalysis
from .compute._anomalies import read_anomalies
from .compute._configs import config_scores
from .compute._criteria import RankContext
from .compute._faults import Fault, read_faults
from .compute._figure_data import figure_data
from .compute._horizon import held_to_of
from .compute._learning_rate import LearningRate, learning_rate_of
from .compute._load import inventory, load_trials, resolve, unreadable_trials
from .compute._rank import rank_configs
from .compute._scores import fp32_reference, trial_scores
from .compute._side_files import read_horizon, read_profile, read_search, read_spec_file
from .wording._answer import answer_lines
from .wording._causes import cause_lines, unlocalized_lines
from .wording._code import recommendation_code
from .wording._evidence import kind_recommendation
from .wording._held import past_the_horizon
from .wording._labels import label_columns

#: device kind / MindSpore target on which float16 is emulated, so speed never decides
CPU_KIND = "cpu"


def speed_decides(kind: str, scores: pd.DataFrame) -> bool:
    """Speed decides only where every trial computed on an accelerator.

    Both the device kind and MindSpore's own ``device_target`` are checked:
    ``--compute-on cpu`` runs on CPU under an accelerator's device kind.
    """
    if str(kind).lower() == CPU_KIND:
        return False
    targets = scores["device_target"].dropna().astype(str).str.lower()
    return not (targets == CPU_KIND).any()


def _sweep_name(trials: pd.DataFrame, fallback: str) -> str:
    names = trials["sweep"].dropna()
    return str(names.mode().iloc[0]) if len(names) else fallback


def _learning_rate(sweep_dir: str | Path) -> LearningRate | None:
    """The workload's learning-rate argument, from the spec the sweep ran (and its factory's source,
    a relative file looked up from the working directory)."""
    spec = read_spec_file(sweep_dir)
    return None if spec is None else learning_rate_of(spec)


def _rank_kind(
    sweep_dir: str | Path,
    kind: str,
    scores: pd.DataFrame,
    anomalies: pd.DataFrame,
    figures: bool,
    horizon: HorizonLog | None = None,
    faults: list[Fault] | None = None,
) -> KindAnalysis:
    reference = fp32_reference(scores)
    ctx = RankContext(speed_decides=speed_decides(kind, scores))
    ranking = label_columns(rank_configs(config_scores(scores, anomalies), reference, ctx))
    recorded = bool(scores["loss_placement_recorded"].any())
    rec = kind_recommendation(ranking, scores, ctx, recorded, _learning_rate(sweep_dir))
    rec.undecided += unlocalized_lines(faults or [], scores)
    rec.evidence["statements"] = [*cause_lines(faults or [], scores), *rec.evidence.get("statements", [])]
    return KindAnalysis(
        device_kind=kind,
        ranking=ranking,
        reference=reference,
        recommendation=_worded(rec, ranking, scores, recorded, horizon),
        speed_decides=ctx.speed_decides,
        figures=figure_data(sweep_dir, ranking, scores) if figures else None,
    )


def _worded(
    rec: Recommendation,
    ranking: pd.DataFrame,
    scores: pd.DataFrame,
    recorded: bool,
    horizon: HorizonLog | None = None,
) -> Recommendation:
    """The recommendation with its words: the code to paste and the answer lines every output opens with."""
    rec.held_to = held_to_of(rec, ranking, scores, horizon)
    if rec.held_to is not None:
        rec.undecided = [*past_the_horizon(rec.held_to), *rec.undecided]
    rec.code = recommendation_code(rec)
    rec.answer = answer_lines(rec, ranking, len(scores), recorded)
    return rec


def analyze(sweep_dir: str | Path, *, figures: bool = True) -> SweepAnalysis:
    """Load, score, aggregate and rank a sweep folder (local path or URI), per device kind.

    ``figures`` also gathers what report.html's figures show (a few trials'
    curves, binned); pass False when only the ranking is wanted.
    """
    loc = resolve(sweep_dir)
    trials = load_trials(sweep_dir)
    unreadable = unreadable_trials(sweep_dir)
    trials = trials[~trials["trial_id"].isin(list(unreadable))].reset_index(drop=True)
    inv = inventory(sweep_dir, trials["trial_id"])
    inv.unreadable = unreadable
    horizon = read_horizon(sweep_dir)
    # judged against FP32 only up to where FP32 broke, on the seeds where it did (the search judges alike)
    faults = read_faults(sweep_dir, list(trials["trial_id"])) if inv.has_anomalies_dir else []
    scores = trial_scores(sweep_dir, trials, faults)
    ranked = scores[scores["ranked"]]
    anomalies = read_anomalies(sweep_dir, list(ranked["trial_id"])) if inv.has_anomalies_dir else None
    kinds = [
        _rank_kind(
            sweep_dir,
            str(kind),
            scores[scores["device_kind"] == kind],
            anomalies,
            figures,
            horizon,
            faults,
        )
        for kind in sorted(set(ranked["device_kind"]))
    ]
    rankings = [k.ranking for k in kinds if not k.ranking.empty]
    if rankings:
        ranking = pd.concat(rankings, ignore_index=True)
    else:
        ranking = label_columns(rank_configs(config_scores(scores, anomalies), fp32_reference(scores)))
    return SweepAnalysis(
        name=_sweep_name(trials, loc.name),
        sweep_dir=str(sweep_dir),
        scores=scores,
        ranking=ranking,
        reference=fp32_reference(scores),
        inventory=inv,
        kinds=kinds,
        search=read_search(sweep_dir),
        profile=read_profile(sweep_dir),
    )
