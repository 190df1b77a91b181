"""The contracts every part of ampsweep shares, each with exactly one owner.

``sweep`` (the driver), ``jobs`` (what runs on a device) and ``analysis``
(offline, Parquet only) must agree on the tables' columns, the sweep folder's
layout and its committed-file rule, the workload reference, the loss-scale
value and the per-trial formulas. They live here, in a leaf package that
imports nothing but pyarrow and NumPy, so ``analysis`` can import them
without importing ``sweep`` or ``jobs``.
"""

from __future__ import annotations

from ._formulas import (
    FINAL_FRACTION,
    LEARNING_SHARE,
    SEED_NOISE_FACTOR,
    TARGET_FROM_FP32,
    TARGET_WINDOW,
    final_loss,
    final_loss_rows,
    first_nonfinite_step,
    learning_share,
    required_share,
    start_loss,
    steps_to_target,
)
from ._layout import (
    CHECKPOINT_SNAPSHOT,
    LOCK_FILE,
    PART_FILE,
    PER_TRIAL_TABLES,
    PLAN_FILE,
    PREFIX_SNAPSHOT,
    SNAPSHOT_FOLDER,
    SPEC_FILE,
    TRIAL_PARTITION_KEY,
    committed_ids,
    is_committed_name,
    is_data_file,
    part_path,
    partition_value,
    trial_folder,
    trial_row_path,
)
from ._loss_scale import DYNAMIC_SCALE_WINDOW, LOSS_SCALE_ALLOWED, LossScale, parse_loss_scale
from ._plan import PlanEntry, decode_plan, encode_plan
from ._reference import REFERENCE_FORM, ReferenceFormError, WorkloadReference, parse_reference
from ._search import (
    CONFIRM_FOLDER,
    SEARCH_FILE,
    LocalizedCell,
    SearchFamily,
    SearchLog,
    SearchRound,
    decode_search,
    encode_search,
)
from ._tables import ANOMALIES_SCHEMA, COLUMN_DOCS, LAYERS_SCHEMA, STEPS_SCHEMA, TABLE_SCHEMAS, TRIALS_SCHEMA
from ._verdict import (
    FP32_LEVEL,
    SILENT_RULE,
    LearningEvidence,
    Outcome,
    TrialVerdict,
    Verdict,
    configuration_verdict,
    trial_verdict,
)

__all__ = [
    "COLUMN_DOCS",
    "FP32_LEVEL",
    "TARGET_FROM_FP32",
    "TARGET_WINDOW",
    "LearningEvidence",
    "LocalizedCell",
    "Outcome",
    "TrialVerdict",
    "Verdict",
    "configuration_verdict",
    "steps_to_target",
    "trial_verdict",
    "DYNAMIC_SCALE_WINDOW",
    "CONFIRM_FOLDER",
    "SEARCH_FILE",
    "SearchFamily",
    "SearchLog",
    "SearchRound",
    "decode_search",
    "encode_search",
    "ANOMALIES_SCHEMA",
    "FINAL_FRACTION",
    "LAYERS_SCHEMA",
    "LOCK_FILE",
    "LOSS_SCALE_ALLOWED",
    "PART_FILE",
    "PER_TRIAL_TABLES",
    "PLAN_FILE",
    "REFERENCE_FORM",
    "LEARNING_SHARE",
    "SEED_NOISE_FACTOR",
    "SILENT_RULE",
    "CHECKPOINT_SNAPSHOT",
    "PREFIX_SNAPSHOT",
    "SNAPSHOT_FOLDER",
    "SPEC_FILE",
    "STEPS_SCHEMA",
    "TABLE_SCHEMAS",
    "TRIALS_SCHEMA",
    "TRIAL_PARTITION_KEY",
    "LossScale",
    "PlanEntry",
    "ReferenceFormError",
    "WorkloadReference",
    "committed_ids",
    "decode_plan",
    "encode_plan",
    "final_loss",
    "final_loss_rows",
    "first_nonfinite_step",
    "is_committed_name",
    "learning_share",
    "required_share",
    "start_loss",
    "is_data_file",
    "parse_loss_scale",
    "parse_reference",
    "part_path",
    "partition_value",
    "trial_folder",
    "trial_row_path",
]
