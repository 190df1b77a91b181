"""How a sweep runs, as plain dataclasses (the spec says *what* runs), like Ray Tune's
``RunConfig``/``FailureConfig``: the CLI's flags map onto them; a bad value fails before Ray starts."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from ._errors import SpecError, SpecFailed
from .devices import DEVICE_KINDS


def check_writer(logdir: str | None) -> None:
    """``--tensorboard`` without the extra that writes the runs is a usage error. tensorboardX is found, not
    imported: its protobuf must not load into a driver before MindSpore's."""
    if logdir is not None and importlib.util.find_spec("tensorboardX") is None:
        needs = "needs tensorboardX, which is not installed: pip install 'ampsweep[tensorboard]'"
        raise SpecFailed("--tensorboard", logdir, needs)


@dataclass(frozen=True)
class FailurePolicy:
    """What a dying worker or a failing workload costs before ampsweep gives up."""

    #: workers one trial may kill (SIGKILL, OOM) before it is recorded ``failed``
    max_attempts: int = 3
    #: actor deaths in a row after which a device slot is given up
    max_slot_deaths: int = 3

    def __post_init__(self) -> None:
        for name in ("max_attempts", "max_slot_deaths"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(name, value, "a whole number >= 1")


@dataclass(frozen=True)
class RunConfig:
    """Where and how to run: the cluster, the devices, the failure policy, the display."""

    #: CPU actors (default: one per core)
    workers: int | None = None
    #: a Ray cluster to join; None starts a private local one (or joins ``RAY_ADDRESS``)
    address: str | None = None
    #: overrides the spec's ``devices``: auto, ascend, gpu or cpu
    devices: str | None = None
    #: "cpu" keeps a device sweep's scheduling and pinning but computes on CPU
    compute_on: str | None = None
    progress: bool = True
    #: run every trial even when the first ones show the workload itself is broken
    keep_going: bool = False
    runtime_env: dict[str, Any] | None = None
    #: None: the spec's ``max_attempts`` with the default slot policy
    failure: FailurePolicy | None = None
    #: also run the FP32 float16-headroom profile (``ampsweep profile``) on the first actor the
    #: trial queue leaves idle; it lands in ``SweepResult.profile`` (the CLI writes profile.json)
    profile: bool = False
    #: on a GPU or NPU, set MindSpore's deterministic mode in every worker so that a rerun is
    #: bit-identical: trials that compute the same are then copied, not trained, and a broken trial
    #: is localized by replaying it. False trades both for the device's faster nondeterministic
    #: kernels: every trial trains and nothing is replayed. CPU reruns are always bit-identical.
    deterministic: bool = True
    #: also write each committed trial as a TensorBoard run under this folder, while the sweep runs
    #: (``ampsweep export --tensorboard``'s runs; needs the ``tensorboard`` extra)
    tensorboard: str | None = None

    def __post_init__(self) -> None:
        if self.workers is not None and (
            not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1
        ):
            raise SpecError("workers", self.workers, "a whole number > 0, or None for one per core")
        if self.devices is not None and self.devices not in ("auto", *DEVICE_KINDS):
            raise SpecError("devices", self.devices, f"allowed: auto, {', '.join(DEVICE_KINDS)}")
        if self.compute_on not in (None, "cpu"):
            raise SpecError("compute_on", self.compute_on, "allowed: cpu, or None")
        check_writer(self.tensorboard)
