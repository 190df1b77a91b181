"""Column names, types and units of the three Parquet tables.

These schemas are the contract between the trainer, the store and the
analysis; the README documents them and a test pins them.
"""

from __future__ import annotations

import pyarrow as pa

TRIALS_SCHEMA = pa.schema(
    [
        ("trial_id", pa.string()),
        ("sweep", pa.string()),
        ("workload", pa.string()),
        ("graph_id", pa.string()),
        ("amp_level", pa.string()),
        ("black_list", pa.list_(pa.string())),
        ("clip", pa.float64()),  # null = clipping off
        ("loss_scale", pa.string()),
        ("dtype", pa.string()),
        ("seed", pa.int64()),
        ("steps", pa.int64()),  # requested
        ("outcome", pa.string()),  # completed | diverged | failed
        ("steps_run", pa.int64()),
        ("first_nonfinite_step", pa.int64()),  # null = loss always finite
        ("final_loss", pa.float64()),
        ("target_loss", pa.float64()),
        ("equivalent_to", pa.string()),  # trial_id this config duplicates, or null
        ("error", pa.string()),
        ("traceback", pa.string()),
        ("wall_s", pa.float64()),  # seconds, whole trial on the worker
        ("compile_s", pa.float64()),  # seconds spent compiling; 0 when a graph was reused
        ("device_kind", pa.string()),  # cpu | gpu | ascend
        ("node", pa.string()),
        ("device_id", pa.string()),  # id Ray assigned, empty on cpu
        ("worker_index", pa.int64()),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
    ]
)

STEPS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),  # 0..steps_run-1
        ("loss", pa.float64()),  # unscaled
        ("grad_norm", pa.float64()),  # global L2 norm, unscaled, before clipping
        ("clipped", pa.bool_()),  # grad_norm > clip
        ("nonfinite", pa.bool_()),  # loss or any gradient element not finite
        ("skipped", pa.bool_()),  # update skipped by loss scaling
        ("loss_scale", pa.float64()),  # scale used in this step; 1.0 without scaling
        ("step_ms", pa.float64()),  # milliseconds; step 0 includes compilation
    ]
)

LAYERS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("layer", pa.string()),  # parameter name as in network.parameters_and_names()
        ("grad_norm", pa.float64()),  # L2 norm of this parameter's unscaled gradient
        ("grad_absmax", pa.float64()),
        ("nonfinite", pa.int64()),  # count of non-finite gradient elements
    ]
)
