"""Column names, types and units of the Parquet tables.

The trainer builds its tables with these schemas, the store writes them, the
analysis and the benchmarks read them; the docs generate their tables from
these and ``COLUMN_DOCS``, and a test
pins them. Nobody else spells a column type.
"""

from __future__ import annotations

import pyarrow as pa

#: why a trial was copied instead of trained (the ``copy_reason`` column), and when that is exact
COPY_REASONS = {
    "equivalent": "it computes exactly what `copied_from` computed on the same compiled graph "
    "(a black list, dtype or loss placement under O0, which casts nothing)",
    "clip_never_reached": "it differs from `copied_from` only by a tighter clip, and `copied_from` completed "
    "with its gradient norm never above that clip, so the clip would never have fired",
}

#: How a trial kept its black-listed classes in float32 (the ``fp32_cells`` column):
#: ``amp.auto_mixed_precision`` at the trial's level, then ``cell.to_float(float32)`` on every
#: instance of a listed class (subclasses too), before the cast under O1 and after it under O2/O3
#: (``jobs.training._amp.keep_in_float32``). Older sweeps used ``amp.custom_mixed_precision``
#: and have no such column (read as null).
FP32_CELLS_MECHANISM = "to_float"

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
        ("outcome", pa.string()),  # completed | diverged | failed | not_applicable
        ("steps_run", pa.int64()),
        ("first_nonfinite_step", pa.int64()),  # global step; null = loss always finite
        ("final_loss", pa.float64()),
        ("target_loss", pa.float64()),
        ("equivalent_to", pa.string()),  # trial_id this config duplicates, or null
        ("copied_from", pa.string()),  # trial_id whose rows a copy took (attempts 0); null = trained
        ("copy_reason", pa.string()),  # why the copy is exact: one of COPY_REASONS; null = trained
        ("error", pa.string()),
        ("traceback", pa.string()),
        ("wall_s", pa.float64()),  # seconds, whole trial on the worker
        ("compile_s", pa.float64()),  # seconds spent compiling; 0 when a graph was reused
        ("device_kind", pa.string()),  # cpu | gpu | ascend
        ("node", pa.string()),
        ("device_id", pa.string()),  # id Ray assigned, empty on cpu
        ("worker_index", pa.int64()),
        (
            "attempts",
            pa.int64(),
        ),  # workers that started it (>1 after a worker died; 0: copied, not trained)
        ("mindspore_version", pa.string()),
        ("device_target", pa.string()),  # what MindSpore computed on: CPU | GPU | Ascend
        ("finished_at", pa.timestamp("ms", tz="UTC")),
        ("start_step", pa.int64()),  # global step the trial started at; 0 = from scratch
        ("start_from", pa.string()),  # content id of the snapshot it started from; null = none
        ("zero_fraction", pa.float64()),  # share of sampled gradient values exactly zero
        ("underflow_fraction", pa.float64()),  # ... zero or below 2^-24 at the trial's loss scale
        ("overflow_mode", pa.string()),  # inf_nan | saturation | ascend_default
        ("started_at", pa.timestamp("ms", tz="UTC")),  # worker clock; null = no worker finished it
        ("diagnose_s", pa.float64()),  # seconds of localization replay after training
        ("fp32_cells", pa.string()),  # FP32_CELLS_MECHANISM; null = O0 or an empty black list
        # elements of the Parameters under the outermost listed Cells: what the black list keeps in FP32
        ("fp32_params", pa.int64()),  # 0 = nothing (O0, an empty list); null = not recorded
        ("fp32_cell_paths", pa.list_(pa.string())),  # the outermost listed Cells, e.g. ["encoder.self_attn"]
        ("devices", pa.int64()),  # devices one trial ran on (data parallel); null = 1, before the column
        ("global_batch", pa.int64()),  # rows of the workload's first batch: what the devices split
    ]
)

STEPS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),  # global: start_step .. start_step + steps_run - 1
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
        ("zero_fraction", pa.float64()),  # share of this gradient's elements exactly zero
        ("underflow_fraction", pa.float64()),  # ... zero or below 2^-24 at the step's loss scale
    ]
)

#: The localized Cell of a trial that went non-finite (or departed from FP32
#: silently): one row per trial whose replay found a culprit.
ANOMALIES_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # nonfinite | departure
        ("replay_step", pa.int64()),  # global step at which the replay caught the Cell
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
        ("input_max_abs", pa.float64()),  # forward: max |x| of the finite part of the Cell's inputs
        ("inner_op", pa.string()),  # the op inside the Cell that overflowed first (replay of the Cell)
        ("inner_max_abs", pa.float64()),  # max |x| of that op's input (exp: its largest value)
        ("intermediate_max_abs", pa.float64()),  # max |x| of the finite intermediates inside the Cell
        ("finite", pa.bool_()),  # the offending tensor held no inf/NaN: where precision was lost upstream
        ("rank", pa.int64()),  # the rank whose part of the global batch broke first (0 on one device)
        ("ranks_broken", pa.int64()),  # how many ranks' parts broke at that step (1 on one device)
        ("cause", pa.string()),  # numerics | input | not_reproduced | unknown (``CAUSES``)
        ("input_position", pa.int64()),  # input: which item of the batch tuple held the non-finite value
        (
            "input_index",
            pa.string(),
        ),  # input: the first non-finite element's index in that item, e.g. "[3, 0]"
        ("attempt", pa.int64()),  # which run of the trial the row is about (1: the first)
        ("node", pa.string()),  # where that run was: Ray node id ...
        ("device_id", pa.string()),  # ... and visible device id
    ]
)

#: Why a trial went non-finite, as its ``anomalies`` row says (``docs/faults.md``): ``numerics``, the
#: replay reproduced it and named the Cell; ``input``, a batch held a non-finite value before the network
#: saw it; ``not_reproduced``, an exact replay stayed finite (a device or transfer fault); ``unknown``, the
#: replay could not be shown exact, or failed (the note says where and why).
NUMERICS, INPUT, NOT_REPRODUCED, UNKNOWN = "numerics", "input", "not_reproduced", "unknown"
CAUSES = (NUMERICS, INPUT, NOT_REPRODUCED, UNKNOWN)

#: Folder name -> schema of every per-trial table (``trials`` is one file per trial).
TABLE_SCHEMAS = {
    "trials": TRIALS_SCHEMA,
    "steps": STEPS_SCHEMA,
    "layers": LAYERS_SCHEMA,
    "anomalies": ANOMALIES_SCHEMA,
}


#: What each column means, in words. The docs' schema tables are generated from the
#: schemas above and these; a test checks that every column has one.
COLUMN_DOCS: dict[str, dict[str, str]] = {
    "trials": {
        "trial_id": "12-hex hash of the trial's settings",
        "sweep": "spec `name`",
        "workload": "workload reference as written in the spec",
        "graph_id": "hash of the settings that change the compiled graph",
        "amp_level": "`O0`…`O3`",
        "black_list": "layer class names kept in FP32",
        "loss_placement": "`inside`: the loss cell is cast together with the network",
        "clip": "clip threshold; null = clipping off",
        "loss_scale": "`none`, `static:<v>`, `dynamic[:<v>]`",
        "dtype": "`float16` or `bfloat16`",
        "seed": "seed",
        "steps": "steps requested",
        "outcome": "`completed`, `diverged`, `failed` or `not_applicable` (the black list could not be "
        "applied to the network: the configuration was never tried, and is listed as such, never ranked)",
        "steps_run": "steps recorded",
        "first_nonfinite_step": "first global step with a non-finite loss; null = always finite",
        "final_loss": "mean finite loss over the last 10 % of steps run",
        "target_loss": "the workload's `target_loss`, or null",
        "equivalent_to": "`trial_id` this trial computes the same as (a black list or dtype under O0), or null; on that trial's graph its rows are that trial's, copied (`attempts` 0)",
        "copied_from": "`trial_id` whose rows this trial took instead of training (`attempts` 0); null = trained",
        "copy_reason": "why the copy is exact: `equivalent` (the same computation on the same graph) or "
        "`clip_never_reached` (a tighter clip that the looser run never reached); null = trained",
        "error": "exception type and the message's first line with words in it, for `failed`",
        "traceback": "full traceback, for `failed`",
        "wall_s": "seconds, whole trial on the worker (0 for a copy: `attempts` 0)",
        "compile_s": "seconds of compilation (first step's time minus a median step)",
        "device_kind": "`cpu`, `gpu` or `ascend`",
        "node": "Ray node id (first 12 characters)",
        "device_id": "visible device id Ray assigned; empty on CPU",
        "worker_index": "index of the actor's device slot",
        "attempts": "workers that started this trial (more than 1 after a worker died mid-trial; 0: not trained, copied from `equivalent_to`, or, with that null, from the same configuration with a looser clip or none, whose gradient norm never exceeded this trial's clip)",
        "mindspore_version": "MindSpore version of the worker that ran it",
        "device_target": "what MindSpore computed on: `CPU`, `GPU` or `Ascend`",
        "start_step": "global step the trial started at: 0 from scratch, N when forked from a snapshot taken after N steps",
        "start_from": "content id of the snapshot it started from (an FP32 prefix, or the user's checkpoint); null = none",
        "started_at": "when the worker started the trial (its own clock); null for a trial no worker finished",
        "finished_at": "when the worker finished the trial, localization included (its own clock); "
        "the driver's commit time for a trial no worker finished",
        "diagnose_s": "seconds the worker spent replaying the trial to localize the broken Cell, after `wall_s`",
        "fp32_cells": "how the black list was kept in FP32: `to_float` (`amp.auto_mixed_precision` at the level, "
        "then `cell.to_float(float32)` on every instance of a listed class, subclasses included; under O1 "
        "before the cast); null under O0 or with an empty black list, and in sweeps written before the column",
        "fp32_params": "how much of the network the black list keeps in FP32: the number of parameter elements "
        "(not tensors) under the outermost Cells of a listed class, each counted once; 0 under O0 or with an "
        "empty black list; null where no worker cast the network (a trial that failed first) and in sweeps "
        "written before the column",
        "fp32_cell_paths": "the outermost Cells of a listed class, by their path in the network (`encoder` "
        "keeps `encoder.self_attn` and everything else inside it in FP32; `` is the network itself, "
        "`loss_fn...` the loss cast with it); the ranking puts a configuration whose paths contain another "
        "stable one's below it; empty under O0 or with an empty black list, null where not recorded",
        "devices": "devices the trial ran on as one data-parallel run (a gang of rank actors); the workload's "
        "batch is the global batch, split evenly across them; null in sweeps written before the column (1)",
        "global_batch": "rows of the first batch the workload yielded: the global batch, which a trial on several "
        "devices splits evenly across them; null where no batch was drawn (a trial that failed first) and in "
        "sweeps written before the column",
        "overflow_mode": "what a float16 overflow became where it ran: `inf_nan` (CPU, GPU, Ascend in INF/NaN mode) or `saturation` (±65504, and NaN as 0: Ascend 910A-era, or `MS_ASCEND_CHECK_OVERFLOW_MODE=SATURATION_MODE`); `ascend_default` when Ascend ran without that variable. Detection counts a float16 value at ±65504 as an overflow either way",
        "zero_fraction": "share of the sampled gradient values (every `layer_every`-th step, all parameters) that are exactly zero",
        "underflow_fraction": "share of the sampled gradient values that float16 cannot hold as nonzero at the trial's loss scale: exactly zero, or below float16's smallest subnormal 2^-24; less the FP32 run's `zero_fraction`, this is the underflow evidence",
    },
    "steps": {
        "step": "global step: `start_step` … `start_step` + `steps_run` - 1 (0-based)",
        "loss": "loss, unscaled",
        "grad_norm": "global L2 norm of the unscaled gradients, before clipping",
        "clipped": "`grad_norm > clip`",
        "nonfinite": "the loss or any gradient element was not finite",
        "skipped": "update skipped by loss scaling (always false without scaling)",
        "loss_scale": "loss scale used in this step; 1.0 without scaling",
        "step_ms": "milliseconds per step (mean over its 25-step block); step 0 includes compilation",
    },
    "layers": {
        "step": "step",
        "layer": "parameter name, e.g. `fc1.weight`",
        "grad_norm": "L2 norm of this parameter's unscaled gradient",
        "grad_absmax": "largest absolute gradient element",
        "nonfinite": "count of non-finite gradient elements",
        "zero_fraction": "share of this gradient's elements that are exactly zero",
        "underflow_fraction": "share of this gradient's elements that are zero or below 2^-24 at the step's loss scale",
    },
    "anomalies": {
        "kind": "`nonfinite` (an output or gradient became inf/NaN) or `departure` (finite, but far from FP32)",
        "replay_step": "global step of the replay at which the Cell was caught",
        "cell": "qualified name inside the network, e.g. `norm1`",
        "cell_class": "the Cell's class, what a black list names",
        "phase": "`forward` (its output) or `backward` (the gradient w.r.t. its input)",
        "input_dtype": "dtype of the Cell's first input",
        "output_dtype": "dtype of the offending tensor",
        "max_abs": "largest finite absolute value of the offending tensor",
        "fp32_max_abs": "the same Cell's value at the same step of an FP32 replay",
        "rel_error": "`departure` only: relative error of the output against FP32",
        "zero_fraction": "share of exact zeros in the offending output",
        "note": "how the replay relates to the compiled run, in words",
        "input_max_abs": "`forward` only: largest finite absolute value of the Cell's inputs",
        "inner_op": "the `mindspore.ops` function inside the Cell that overflowed first when the Cell was "
        "replayed alone on its inputs (e.g. `exp`); null when not seen",
        "inner_max_abs": "largest absolute value of that function's input (for `exp`, its largest value: "
        "a large negative input gives 0, not an overflow)",
        "intermediate_max_abs": "largest finite absolute value of the intermediates inside the Cell in that replay",
        "finite": "the offending tensor held no inf/NaN: the Cell whose output first reached 10x FP32's at the "
        "step where a Cell after it went non-finite (precision lost here, the overflow further on); null in "
        "sweeps written before this column",
        "rank": "on a gang (`devices_per_trial` > 1), the rank whose part of the global batch the Cell broke on "
        "first, in the order one device looks (the step, forward before backward, then the lowest rank), or "
        "the rank whose localization failed; 0 on one device; null in sweeps written before this column",
        "ranks_broken": "how many ranks' parts broke at that step in that phase (1 on one device); null in "
        "sweeps written before this column",
        "cause": "`numerics`: the replay reproduced the trial and named the Cell; `input`: a batch held a "
        "non-finite value before the network saw it (no Cell is blamed); `not_reproduced`: a replay that matched "
        "the trial bit for bit up to the step before stayed finite (a device or transfer fault: the trial ran "
        "again elsewhere); `unknown`: the replay could not be shown exact, or failed (`note` says on which rank "
        "and why); null in sweeps written before this column",
        "input_position": "`input` only: the item of the batch tuple that held the non-finite value (0: the first)",
        "input_index": "`input` only: the index of its first non-finite element, e.g. `[3, 0]`",
        "attempt": "which run of the trial the row describes: 1 for the first; a `not_reproduced` first run's row "
        "stays beside its rerun's",
        "node": "Ray node id (first 12 characters) of the run the row describes",
        "device_id": "visible device id of the run the row describes; empty on CPU",
    },
}


def error_line(exc: BaseException) -> str:
    """``Type: message``, one line, as the ``error`` column holds it: the message's first line with a word in
    it, so a MindSpore message that opens with a rule of dashes or a ``- Section:`` header reads as its news."""
    lines = [line.strip() for line in str(exc).splitlines() if any(c.isalnum() for c in line)]
    said = [line for line in lines if not (line.startswith("- ") and line.endswith(":"))] or lines
    return f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__
