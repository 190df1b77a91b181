"""What the report says about a NaN that was not the configuration's doing (docs/faults.md): a bad
batch, a NaN that did not reproduce and its rerun, a suspect device and how to leave it out.
"""

from __future__ import annotations

import pandas as pd

from ampsweep.contracts import INPUT, NOT_REPRODUCED, UNKNOWN

from ..compute._faults import Fault, suspect_devices
from ._localization import trial_label


def _device(node: object, device_id: object) -> str:
    """'node 3f2a…, device 3' ('node 3f2a…' where the device has no id: a CPU worker)."""
    node, device_id = "" if pd.isna(node) else str(node), "" if pd.isna(device_id) else str(device_id)
    return f"node {node}, device {device_id}" if device_id else f"node {node}"


def cause_lines(faults: list[Fault], scores: pd.DataFrame) -> list[str]:
    """The evidence's lines about bad batches, NaNs that did not reproduce, and suspect devices."""
    trials = scores.set_index("trial_id")
    known = [f for f in faults if f.trial_id in trials.index]
    lines = _input_lines([f for f in known if f.cause == INPUT], trials)
    for fault in known:
        if fault.cause == NOT_REPRODUCED and fault.attempt == 1:
            lines.append(_rerun_line(fault, trials.loc[fault.trial_id], known))
    for device in suspect_devices(known):
        where = _device(device.node, device.device_id)
        lines.append(
            f"Suspect device: {where}: {device.faults} NaNs there did not reproduce on replay. Leave it out of "
            f"the next run with `avoid_devices: ['{device.node}:{device.device_id}']` in the spec."
        )
    return lines


def _input_lines(faults: list[Fault], trials: pd.DataFrame) -> list[str]:
    """One line per bad batch: where it sat, which trials saw it, and, where every trial of a seed did,
    that the data is what to fix."""
    lines = []
    by_note: dict[str, list[Fault]] = {}
    for fault in faults:
        by_note.setdefault(fault.note, []).append(fault)
    for note, hit in by_note.items():
        seeds = sorted({trials.loc[f.trial_id, "seed"] for f in hit}, key=str)
        of_seed = trials[trials["seed"].isin(seeds) & trials["equivalent_to"].isna()]
        named = trial_label(trials.loc[hit[0].trial_id])
        others = f" and {len(hit) - 1} more trial(s)" if len(hit) > 1 else ""
        devices = trials.loc[hit[0].trial_id, "devices"]
        rank = f" (rank {hit[0].rank}'s part)" if not pd.isna(devices) and int(devices) > 1 else ""
        line = (
            f"A bad batch, not the precision: {note}{rank}, in {named}{others}. Every configuration of that "
            "seed trains on it, so it counts against none of them: those trials are reported, not ranked."
        )
        if len(hit) >= len(of_seed):
            line += (
                f" Every trial of seed {', '.join(map(str, seeds))} saw it: fix the data, not the precision."
            )
        lines.append(line)
    return lines


def _rerun_line(first: Fault, rerun: pd.Series, faults: list[Fault]) -> str:
    """'The NaN of O2 · no clip · seed 1 at step 20 on node N, device 3 did not reproduce on replay, and
    a rerun on node M, device 5 trained to the end: ...' ('on the same device' where no other was free)."""
    where, again_where = _device(first.node, first.device_id), _device(rerun["node"], rerun["device_id"])
    head = (
        f"The NaN of {trial_label(rerun)} at step {first.step} on {where} did not reproduce on replay, and a "
        f"rerun on {'the same device' if again_where == where else again_where}"
    )
    again = [f for f in faults if f.trial_id == first.trial_id and f.attempt > 1]
    if rerun["outcome"] == "completed" and not again:
        return f"{head} trained to the end: a device or transfer fault, not numerics. The ranking uses the rerun."
    if not pd.isna(rerun["first_nonfinite"]) and int(rerun["first_nonfinite"]) == first.step:
        return f"{head} broke at the same step: numerics after all, localized on the rerun."
    return f"{head} ended {rerun['outcome']}. The ranking uses the rerun."


def unlocalized_lines(faults: list[Fault], scores: pd.DataFrame) -> list[str]:
    """'O2 · no clip · seed 1: localization failed on rank 1 of 2: RuntimeError: ...', one per trial."""
    trials = scores.set_index("trial_id")
    return [
        f"{trial_label(trials.loc[f.trial_id])}: {f.note}"
        for f in faults
        if f.cause == UNKNOWN and f.trial_id in trials.index
    ]
