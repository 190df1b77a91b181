"""The contracts every part of ampsweep shares, each with exactly one owner.

``sweep`` (the driver), ``jobs`` (what runs on a device) and ``analysis``
(offline, Parquet only) must agree on the tables' columns, the sweep folder's
layout and its committed-file rule, the workload reference, the loss-scale
value and the per-trial formulas. They live here, in a leaf package that
imports nothing but pyarrow and NumPy, so ``analysis`` can import them
without importing ``sweep`` or ``jobs``. The names imported below are its public names (no ``__all__``
lists them again).
"""

# ruff: noqa: F401
from __future__ import annotations

from ._configuration import (
    ARG_COLUMN_PREFIX,
    LOSS_INSIDE,
    LOSS_OUTSIDE,
    NAME_SEPARATOR,
    Configuration,
    arg_column,
    arg_text,
    black_list_of,
    black_list_value,
    clip_name,
    clip_value,
    dtype_name,
    is_float32,
    is_precision_knob,
    level_name,
    loss_placement_name,
    loss_scale_name,
    reference_value,
    workload_args_of,
    workload_args_value,
)
from ._formulas import (
    FINAL_FRACTION,
    FLOAT16_MAX,
    FLOAT16_TINY,
    FORWARD_BLOWUP,
    LEARNING_SHARE,
    TARGET_FROM_FP32,
    TARGET_WINDOW,
    UNDERFLOW_EVIDENCE,
    final_loss,
    final_loss_rows,
    first_nonfinite_step,
    saturated,
    start_loss,
    steps_to_target,
    underflow_excess,
)
from ._horizon import (
    HORIZON_FILE,
    HORIZON_FOLDER,
    Continued,
    HorizonLog,
    decode_horizon,
    encode_horizon,
    held_to,
)
from ._layout import (
    CHECKPOINT_SNAPSHOT,
    LOCK_FILE,
    PER_TRIAL_TABLES,
    PLAN_FILE,
    PREFIX_SNAPSHOT,
    PROFILE_FILE,
    SNAPSHOT_FOLDER,
    SPEC_FILE,
    TRIAL_PARTITION_KEY,
    committed_ids,
    is_data_file,
    part_path,
    partition_value,
    trial_folder,
    trial_row_path,
    trial_snapshot,
)
from ._loss_scale import (
    DYNAMIC_SCALE_WINDOW,
    parse_loss_scale,
    static_scale_for,
)
from ._numbers import num, number, pct
from ._plan import PlanEntry, decode_plan, encode_plan
from ._reference import ReferenceFormError, WorkloadReference, locate_file, parse_reference
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
from ._tables import (
    ANOMALIES_SCHEMA,
    CAUSES,
    COLUMN_DOCS,
    FP32_CELLS_MECHANISM,
    INPUT,
    LAYERS_SCHEMA,
    NOT_REPRODUCED,
    NUMERICS,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    TRIALS_SCHEMA,
    UNKNOWN,
    error_line,
)
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
