"""Column names, types and units of the Parquet tables.

The trainer builds its tables with these schemas, the store writes them, the
analysis and the benchmarks read them; the README documents them and a test
pins them. Nobody else spells a column type.
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
        ("loss_placement", pa.string()),  # outside | inside: is the loss cell cast with the network
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
        ("attempts", pa.int64()),  # workers that started this trial (>1 after a worker died)
        ("mindspore_version", pa.string()),
        ("device_target", pa.string()),  # what MindSpore computed on: CPU | GPU | Ascend
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

#: The localized Cell of a trial that went non-finite (or departed from FP32
#: silently): one row per trial whose replay found a culprit.
ANOMALIES_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # nonfinite | departure
        ("replay_step", pa.int64()),  # step of the replay at which the Cell was caught
        ("cell", pa.string()),  # qualified name inside the network, e.g. "norm1"
        ("cell_class", pa.string()),
        ("phase", pa.string()),  # forward | backward
        ("input_dtype", pa.string()),
        ("output_dtype", pa.string()),
        ("max_abs", pa.float64()),  # max |x| of the finite part of the offending tensor
        ("fp32_max_abs", pa.float64()),  # same Cell, same step, FP32 replay
        ("rel_error", pa.float64()),  # departure only: |x - x_fp32| / |x_fp32|
        ("zero_fraction", pa.float64()),  # share of exact zeros in the offending output
        ("note", pa.string()),
    ]
)

#: Folder name -> schema of every per-trial table (``trials`` is one file per trial).
TABLE_SCHEMAS = {
    "trials": TRIALS_SCHEMA,
    "steps": STEPS_SCHEMA,
    "layers": LAYERS_SCHEMA,
    "anomalies": ANOMALIES_SCHEMA,
}
