"""``report/ranking.csv``: every configuration, fixed columns (stable for scripts).

Formatting only: every column is the ranking's own (a broken row's convergence columns are empty, its
``broke_at`` says where it broke); ``black_list`` is written ``A, B`` and ``workload_args``
``name=value, ...`` (``none`` when empty).
"""

from __future__ import annotations

import pandas as pd

from ampsweep.contracts import Configuration, black_list_value, workload_args_value

from .._model import CONVERGENCE_COLUMNS

#: Columns of ``ranking.csv``, in order: identity, verdict, evidence, rank, rule.
RANKING_COLUMNS = (
    "rank",
    "recommended",
    "baseline",
    "stability",
    "label",
    *Configuration.FIELDS,
    "n_seeds",
    "n_trials",
    "n_completed",
    "n_diverged",
    "n_failed",
    "divergence_rate",
    "first_nonfinite_step_median",
    "broke_at",
    "clip_label",
    "clip_rate_median",
    "clip_rate_min",
    "clip_rate_max",
    "target_median",
    "n_reached_target",
    *CONVERGENCE_COLUMNS,
    "speed_vs_fp32_median",
    "speed_vs_fp32_min",
    "speed_vs_fp32_max",
    "steps_per_s_median",
    "skipped_steps_median",
    "loss_spikes_median",
    "n_black_listed",
    "localized",
    "config_id",
    "trial_ids",
    "tied_with_above",
    "tied_on",
    "decided_by",
    "phrase",
    "reason",
    "rule",
)


def ranking_csv(ranking: pd.DataFrame) -> str:
    """The ranking as CSV text with a fixed column order."""
    table = ranking.reindex(columns=list(RANKING_COLUMNS))
    table["black_list"] = [black_list_value(b) if isinstance(b, tuple) else b for b in table["black_list"]]
    table["workload_args"] = [
        workload_args_value(w) if isinstance(w, tuple) else w for w in table["workload_args"]
    ]
    table["tied_on"] = [", ".join(t) if isinstance(t, tuple) else t for t in table["tied_on"]]
    return table.to_csv(index=False, lineterminator="\n")
