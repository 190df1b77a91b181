"""``ampsweep status DIR`` (``docs/cli.md``): how far a sweep is, from its folder alone (no Ray, no
MindSpore): committed rows, ``plan.json`` and a live driver's lock."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from ampsweep.contracts import PLAN_FILE, Outcome, decode_plan

from ._lock import is_live, read_lock
from ._store import SweepStore

_OUTCOMES = tuple(o.value for o in Outcome)


@dataclass
class SweepStatus:
    name: str
    planned: int | None  # None without a plan file (a sweep written by an older ampsweep)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    driver: str | None = None  # "pid 12 on host, started ...", when a driver is alive
    #: devices where more than one NaN did not reproduce on replay: (node, device id, how many)
    suspects: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def committed(self) -> int:
        return sum(sum(c.values()) for c in self.by_kind.values())

    @property
    def missing(self) -> int | None:
        if self.planned is None:
            return None
        return max(self.planned - self.committed, 0)

    def lines(self) -> list[str]:
        total: Counter[str] = Counter()
        for counts in self.by_kind.values():
            total.update(counts)
        planned = "?" if self.planned is None else str(self.planned)
        missing = "?" if self.missing is None else str(self.missing)
        head = (
            f"{self.name}: {planned} planned · "
            + " · ".join(f"{o} {total[o]}" for o in _OUTCOMES)
            + f" · missing {missing} · running {len(self.running)}"
        )
        rows = [head]
        for kind, counts in sorted(self.by_kind.items()):
            rows.append(f"  {kind or '?'}: " + " · ".join(f"{o} {counts[o]}" for o in _OUTCOMES))
        if self.driver:
            rows.append(f"  driver: {self.driver}")
        for trial_id in self.unreadable:
            rows.append(f"  unreadable: {trial_id} (reported by `report`, run again by `run`)")
        for node, device, faults in self.suspects:
            where = f"node {node}, device {device}" if device else f"node {node}"
            rows.append(
                f"  suspect device: {where}: {faults} NaNs did not reproduce; avoid_devices: ['{node}:{device}']"
            )
        return rows


def sweep_status(location: str) -> SweepStatus:
    """Count a sweep folder's trials; ``FileNotFoundError`` when it is not a sweep folder."""
    store = SweepStore.at(location)
    if not store.exists("trials") and not store.exists(PLAN_FILE):
        raise FileNotFoundError(f"{location} holds no trials/ folder and no {PLAN_FILE}")
    plan_text = store.read_text(PLAN_FILE)
    planned = len(decode_plan(plan_text)) if plan_text else None
    status = SweepStatus(name=store.name, planned=planned)
    committed = sorted(store.committed())
    for trial_id in committed:
        try:
            row = store.trial_row(trial_id, ["outcome", "device_kind"])
        except (OSError, pa.ArrowException):
            status.unreadable.append(trial_id)
            continue
        status.by_kind.setdefault(row["device_kind"] or "", Counter())[row["outcome"]] += 1
    from ampsweep.analysis import read_faults, suspect_devices

    found = suspect_devices(read_faults(location, committed))
    status.suspects = [(d.node, d.device_id, d.faults) for d in found]
    lock = read_lock(store)
    if lock is not None and is_live(lock):  # a driver killed with -9 left its lock behind
        status.running = list(lock.running)
        status.driver = lock.describe()
    return status
