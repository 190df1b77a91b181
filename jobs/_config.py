"""One point of the grid, as data that crosses process and machine boundaries: the actor's input, so it
lives in ``jobs``, and imports nothing heavy so the driver can build thousands of them cheaply."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ampsweep.contracts import FP32_LEVEL, LOSS_INSIDE, LOSS_OUTSIDE, Configuration, workload_args_of

#: what a user chooses (``Configuration``'s fields, but the device kind and the swept arguments)
_CHOSEN_FIELDS = ("amp_level", "black_list", "clip", "loss_scale", "dtype", "loss_placement")
#: the values that make the same trial, every field that can change a step metric (the loss placement:
#: see :meth:`TrialConfig.canonical`)
_IDENTITY_FIELDS = ("workload", "workload_args", "steps", "abort_after", "seed", *_CHOSEN_FIELDS[:-1])


def _short_hash(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TrialConfig:
    """A configuration, its seed and the run settings (``docs/sweep-and-trial.md``); ``workload`` is the
    reference as the spec wrote it, so the id does not depend on where the file sits on a machine."""

    workload: str
    steps: int
    abort_after: int
    amp_level: str
    black_list: tuple[str, ...]
    clip: float | None
    loss_scale: str
    dtype: str
    seed: int
    workload_args: dict[str, Any] = field(default_factory=dict)
    layer_every: int = 50
    #: ``outside``: the network alone is cast and the loss runs in float32 on its
    #: output (``Model``, a hand-written loop); ``inside``: a cast ``WithLossCell``
    loss_placement: str = LOSS_OUTSIDE
    #: replay a trial that broke to name the Cell that did (costs seconds per broken trial)
    localize: bool = True
    #: the global step the trial starts at: 0 trains from the factory's initial state;
    #: N > 0 loads the snapshot ``start_from`` (taken after N steps) and continues the data there
    start_step: int = 0
    #: content id of that snapshot (an FP32 prefix the sweep ran, or the user's checkpoint)
    start_from: str | None = None
    #: an FP32 prefix run: train ``steps`` steps, then hand back a snapshot of the state
    save_snapshot: bool = False
    #: a data-parallel trial on this many devices (a gang); the workload's batch is the global batch
    devices: int = 1
    #: which of ``workload_args`` the grid sweeps (``grid.workload_args``): part of the configuration.
    #: Not in the id: the id holds every argument's value already, fixed or swept
    swept_args: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, configuration: Configuration, seed: int, workload: str, steps: int, **settings: Any
    ) -> TrialConfig:
        """``configuration`` trained on ``seed``, the other fields from ``settings`` (``abort_after`` 10
        unless given; ``workload_args``: every argument's value, fixed or swept, the swept ones it names)."""
        return cls(
            workload=workload,
            steps=steps,
            seed=seed,
            **{"abort_after": 10, **settings},
            **{name: getattr(configuration, name) for name in _CHOSEN_FIELDS},
            swept_args=tuple(name for name, _ in configuration.workload_args),
        )

    @classmethod
    def fp32(cls, workload: str, seed: int, steps: int, **settings: Any) -> TrialConfig:
        """A plain FP32 run (O0: no black list, clip or loss scale), not localized: a prefix or a profile."""
        return cls.of(Configuration(FP32_LEVEL), seed, workload, steps, **{**settings, "localize": False})

    def canonical(self) -> dict[str, Any]:
        canonical = {key: getattr(self, key) for key in _IDENTITY_FIELDS}
        canonical["black_list"] = sorted(self.black_list)
        # the only placement before the axis existed: out of the id, so those sweeps resume as they were
        if self.loss_placement != LOSS_INSIDE:
            canonical["loss_placement"] = self.loss_placement
        # a trial from step 0 keeps the id it had before trials could fork
        if self.start_step or self.start_from:
            canonical["start_step"] = self.start_step
            canonical["start_from"] = self.start_from
        if self.save_snapshot:
            canonical["save_snapshot"] = True
        # a single-device trial keeps the id it had before trials could span a gang
        if self.devices != 1:
            canonical["devices"] = self.devices
        return canonical

    # cached: the driver asks for both on every dispatch and commit, and a hash of the
    # canonical JSON each time is most of a dispatch's cost (frozen: they never change)
    @cached_property
    def trial_id(self) -> str:
        return _short_hash(self.canonical())

    @cached_property
    def graph_id(self) -> str:
        """The workload and :meth:`Configuration.graph_fields`: trials that differ only elsewhere
        (clip, seed, a static scale's value) share one network and one compile."""
        graph = {"workload": self.workload, "workload_args": self.workload_args}
        graph.update(self.configuration.graph_fields())
        if self.loss_placement == LOSS_INSIDE:
            graph.pop("loss_placement", None)  # out of the hash, as in :meth:`canonical`
        return _short_hash(graph)

    @cached_property
    def configuration(self) -> Configuration:
        """What the user chose for this trial, except the seed (no device kind: not run yet)."""
        swept = {name: self.workload_args[name] for name in self.swept_args}
        return Configuration(
            **{name: getattr(self, name) for name in _CHOSEN_FIELDS}, workload_args=workload_args_of(swept)
        )

    @property
    def label(self) -> str:
        """The trial as every output names it, dtype and loss placement spelled:
        'O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · seed 0'."""
        return self.configuration.trial_name(self.seed, spell=("dtype", "loss_placement"))
