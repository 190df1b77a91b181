"""``report/recommendation.json``: the recommendation as data, for scripts and CI.

Why a file of its own: report.md is for people; a pipeline that wants to pick
up the chosen AMP settings (or fail a job when nothing is stable) should not
parse Markdown. The document is UTF-8 JSON, keys in the order below, numbers
as JSON numbers, and ``null`` wherever a figure is unknown (NaN never appears).

Schema ``ampsweep.recommendation/1``::

    {
      "schema": "ampsweep.recommendation/1",
      "sweep": str,                       # sweep name (trials' `sweep` column)
      "status": "recommended"             # every device kind has a stable mixed-precision config
              | "no_stable_config"        # no device kind has one: keep FP32, see next_steps
              | "partial"                 # some kinds have one, some do not
              | "no_trials",              # nothing could be ranked
      "device_kinds": [str],              # sorted; one entry in recommendations[] each
      # The next six mirror recommendations[0] when the sweep has exactly one
      # device kind, and are null otherwise (read recommendations[] then):
      "config": Config | null,
      "evidence": Evidence | null,
      "seeds_agreeing": int | null,
      "seeds_total": int | null,
      "undecided": [str] | null,
      "code": Code | null,
      "recommendations": [Recommendation],
      "not_applicable": [str]             # configurations whose black list could not be applied: never
                                          #   trained, never ranked ("name: reason (trials ...)")
    }

    Recommendation = {
      "device_kind": str,
      "status": "recommended" | "no_stable_config" | "no_trials",
      "config": Config | null,            # null unless status is "recommended"
      "config_id": str | null,            # the stable key, every choice named (ampsweep.contracts.config_id):
                                          #   "O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · on cpu"
      "text": str,                        # the recommendation (or its absence) in one sentence
      "rank": int | null,                 # recommended only: its row in this kind's ranking
      "rule": str | null,                 # recommended only: why it ranks where it does
      "fallback": {"config": Config, "config_id": str} | null,   # no_stable_config only: FP32
      "evidence": Evidence,
      "seeds_agreeing": int,              # seeds whose own trials rank this config first among
      "seeds_total": int,                 #   the configs stable on every seed (0 when not recommended)
      "seed_picks": [{"seed": int | null, "config_id": str, "agrees": bool}],
      "undecided": [str],                 # what the sweep could not decide (gaps in the grid, seed noise)
      "next_sweep": {"cause": "underflow"|"overflow"|"no_learning", "why": str, "change": str,
                     "grid": {...}, "search": str|null, "spec": "next-spec.yaml"|null} | null,
                                          # no_stable_config: what the sweep lacked; the spec beside report.md
                                          #   (null: no sweep can add it, the change is to the code)
      "next_steps": [str],                # no_stable_config: what to try next; otherwise []
      "code": Code | null,                # the recommended config; the FP32 fallback when none is stable
      "localization": Localization | null,   # the Cell that goes wrong without the change (anomalies)
      "loss_placement": str | null,       # of the recommended trials, when the trials recorded it
      "notes": [str],                     # one-sentence notes, e.g. a class that already computes in float32
      "answer": [str]                     # the first lines of every output: the change, why, how sure
    }

    Localization = {"kind": "nonfinite" | "departure", "cell": str, "cell_class": str,
                    "phase": "forward" | "backward", "seeds": [int | null],   # the seeds that agree
                    "n_trials": int, "replay_step": float | null, "input_dtype": str, "output_dtype": str,
                    "max_abs": float | null, "fp32_max_abs": float | null,   # max |x| under the policy / FP32
                    "rel_error": float | null, "zero_fraction": float | null, "note": str,
                    "config_id": str,                # the configuration it was seen in
                    "inner_op": str,                 # what overflowed inside the Cell ("exp"), "" if not seen
                    "input_max_abs": float | null,   # max |x| of the Cell's inputs in the replay
                    "inner_max_abs": float | null,   # max |x| of the inner primitive's input
                    "text": str}                     # the sentence

    Config = {"amp_level": "O0"|"O1"|"O2"|"O3", "black_list": [str],   # class names kept in float32
              "clip": float | null,                                     # global-norm threshold; null = off
              "loss_scale": str,                                        # "none", "static:<v>", "dynamic[:<v>]"
              "dtype": "float16"|"bfloat16", "device_kind": str,
              "loss_placement": "inside"|"outside"}                    # "inside" for older sweeps

    Code = {"train_step": str,            # Python: hand-written value_and_grad + ms.jit step
            "model": str}                 # Python: the same for mindspore.train.Model

    Evidence (recommended) = {
      "n_trials", "n_seeds", "n_diverged", "n_failed": int,
      "target_loss": float | null,
      "final_loss", "steps_to_target", "clip_rate", "speed_vs_fp32":
          {"median": float | null, "min": float | null, "max": float | null},   # over seeds
      "loss_spikes_median": float | null,
      "fp32": Row & {"final_loss_delta", "final_loss_delta_rel", "steps_to_target_delta": float | null,
                     "text": str} | null,            # the FP32 baseline of the same kind
      "neighbours": [Row & {"relation": "clip_smaller" | "clip_larger" | "black_list_without"
                                        | "workload_arg",   # another value of one swept workload argument
                            "class": str,            # black_list_without only: the class removed
                            "argument": str,         # workload_arg only: the argument whose value differs
                            "label": str, "tried": bool,
                            "same_class": bool | null,   # same stability tier and clip class (not workload_arg)
                            "text": str}],           # untried neighbours carry only config/label/text
      "runner_up": Row & {"rule": str, "text": str,            # next stable mixed-precision config
                          "within_noise": bool,              # tied with the recommendation within seed noise
                          "tied_on": str,                    # the scores it is tied on ("" if not within noise)
                          "decided_by": str, "decided_by_label": str,   # the criterion that ranks it second
                          "decided_by_score": bool} | null,  # that criterion is a score measured per seed
      "statements": [str]                 # the evidence as sentences, as report.md prints them
    }
    Evidence (no_stable_config) = {"closest": Row & {"rule", "text"} | null, "fp32": Row | null,
                                   "statements": [str]}

    Row = {"config_id": str, "label": str,   # label: the name every output shows, "FP32" for O0,
                                             #   "O2 · FP32: ExpSoftmax · clip 1.0"
           "config": Config, "rank": int, "stability": str, "clip_label": str,
           "n_trials", "n_seeds", "n_diverged", "n_failed": int,
           "first_nonfinite_step_median", "clip_rate_median", "steps_to_target_median",
           "final_loss_median", "speed_vs_fp32_median": float | null,
           "broke_at": str}                   # "NaN at ~1,367" when a seed diverged (then steps to
                                               # target and final loss are null), else ""
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from .._model import (
    NEXT_SPEC_FILE,
    STATUS_NO_STABLE,
    STATUS_NO_TRIALS,
    STATUS_RECOMMENDED,
    Recommendation,
    SweepAnalysis,
    clean,
)
from ..wording._faults import localization_phrase
from ..wording._not_tried import not_tried_items

SCHEMA = "ampsweep.recommendation/1"
STATUS_PARTIAL = "partial"
_MIRRORED = ("config", "evidence", "seeds_agreeing", "seeds_total", "undecided", "code")


def recommendation_entry(rec: Recommendation) -> dict[str, Any]:
    """One ``recommendations[]`` entry, derived from the dataclass (keys in schema order)."""
    loc = rec.localization
    loc_data = None if loc is None else {**asdict(loc), "text": localization_phrase(loc)}
    return clean(
        {
            "device_kind": rec.device_kind,
            "status": rec.status,
            "config": rec.config,
            "config_id": rec.config_id,
            "text": rec.text,
            "rank": rec.rank,
            "rule": rec.rule,
            "fallback": rec.fallback,
            "evidence": rec.evidence,
            "seeds_agreeing": rec.seeds_agreeing,
            "seeds_total": rec.seeds_total,
            "seed_picks": rec.seed_picks,
            "undecided": rec.undecided,
            "next_steps": rec.next_steps,
            "code": rec.code,
            "localization": loc_data,
            "loss_placement": rec.loss_placement,
            "notes": rec.notes,
            "answer": list(rec.answer),
            "next_sweep": None
            if rec.next_sweep is None
            else {**rec.next_sweep.as_dict(), "spec": NEXT_SPEC_FILE if rec.next_sweep.has_spec else None},
        }
    )


def recommendation_document(a: SweepAnalysis) -> dict[str, Any]:
    """The document as a dict (see the module docstring for the schema)."""
    recs = [recommendation_entry(k.recommendation) for k in a.kinds]
    statuses = {r["status"] for r in recs}
    if not recs or statuses == {STATUS_NO_TRIALS}:
        status = STATUS_NO_TRIALS
    elif statuses == {STATUS_RECOMMENDED}:
        status = STATUS_RECOMMENDED
    elif STATUS_RECOMMENDED in statuses:
        status = STATUS_PARTIAL
    else:
        status = STATUS_NO_STABLE
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "sweep": a.name,
        "status": status,
        "device_kinds": [k.device_kind for k in a.kinds],
    }
    single = recs[0] if len(recs) == 1 else None
    for key in _MIRRORED:
        doc[key] = None if single is None else single.get(key)
    doc["recommendations"] = recs
    doc["not_applicable"] = not_tried_items(a)
    return clean(doc)


def recommendation_json(a: SweepAnalysis) -> str:
    """The document as indented JSON text (``allow_nan=False``: nulls, never NaN)."""
    return json.dumps(recommendation_document(a), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
