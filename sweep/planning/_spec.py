"""The sweep file (``docs/spec.md``): ``yaml.safe_load``, then pydantic for its shapes; the workload is
checked next (``_workload_check``). Both raise a one-line ``SpecError``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ampsweep.contracts import FP32_LEVEL, ReferenceFormError, arg_text, parse_loss_scale, parse_reference

from .._errors import SpecError

AmpLevel = Literal["O0", "O1", "O2", "O3"]
LossPlacement = Literal["outside", "inside"]
DType = Literal["float16", "bfloat16"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DEVICE = re.compile(r"^([0-9A-Za-z]+):([\w-]*)$")


class Grid(BaseModel):
    """The axes; the grid is their product."""

    model_config = ConfigDict(extra="forbid")

    amp_level: list[AmpLevel] = [FP32_LEVEL, "O2"]
    black_list: list[list[str]] = [[]]
    clip: list[float | None] = [None]
    loss_scale: list[str] = ["none"]
    dtype: list[DType] = ["float16"]
    seed: list[StrictInt] = [0]  # strict: YAML's `true` is not seed 1
    #: ``outside``: the loss runs in float32 on the cast network's output (``Model``, a
    #: hand-written loop); ``inside``: the loss cell is cast with the network
    loss_placement: list[LossPlacement] = ["outside"]
    #: the workload factory's own keyword arguments as axes, each value list in order of preference
    #: (cheapest first: between configurations that tie, the earlier value wins)
    workload_args: dict[str, list[Any]] = Field(default_factory=dict)

    @field_validator("clip")
    @classmethod
    def _positive_clip(cls, values: list[float | None]) -> list[float | None]:
        for value in values:
            if value is not None and not value > 0:
                raise ValueError(f"clip {value!r} must be a number > 0 or null (no clipping)")
        return values

    @field_validator("loss_scale")
    @classmethod
    def _loss_scale_form(cls, values: list[str]) -> list[str]:
        for value in values:
            parse_loss_scale(value)  # its ValueError names what is allowed
        return values

    @field_validator("amp_level", "black_list", "clip", "loss_scale", "dtype", "seed", "loss_placement")
    @classmethod
    def _no_repeats(cls, values: list[Any]) -> list[Any]:
        # a repeated value is almost always a typo (1.0 for 1.5): refuse, do not de-duplicate
        if not values:
            raise ValueError("an axis needs at least one value")
        seen: list[Any] = []
        for value in values:
            key = sorted(set(value)) if isinstance(value, list) else value
            if key in seen:
                raise ValueError(f"{value!r} appears twice; every value of an axis must differ")
            seen.append(key)
        return values


class Confirm(BaseModel):
    """The confirmation round of ``search: adaptive``: the top configurations again, on more seeds, longer."""

    model_config = ConfigDict(extra="forbid")

    #: seeds added to the grid's seeds (a divergence hitting one run in four needs more than three)
    seeds: int = Field(default=3, ge=0)
    #: the confirmation trains this many times the sweep's ``steps`` (a late divergence)
    steps_factor: int = Field(default=3, ge=1)
    #: how many of the best configurations on the minimal black list are confirmed
    top: int = Field(default=1, ge=1)


class StartFrom(BaseModel):
    """Where every trial starts: ``{steps: N}``, after one FP32 prefix per seed; ``{checkpoint: PATH}`` (or
    ``{seed: PATH}``), from a ``ModelCheckpoint`` file, at its ``global_step`` unless ``step`` says."""

    model_config = ConfigDict(extra="forbid")

    steps: int | None = Field(default=None, gt=0)
    checkpoint: str | dict[int, str] | None = None
    step: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_form(self) -> StartFrom:
        if (self.steps is None) == (self.checkpoint is None):
            raise ValueError("give exactly one of {steps: N} (an FP32 prefix) or {checkpoint: PATH}")
        if self.steps is not None and self.step is not None:
            raise ValueError("step goes with checkpoint; {steps: N} already says where trials start")
        if isinstance(self.checkpoint, dict) and not self.checkpoint:
            raise ValueError("checkpoint: a mapping from seed to path must name at least one seed")
        return self


class SweepSpec(BaseModel):
    """A whole sweep file."""

    model_config = ConfigDict(extra="forbid")

    name: str
    workload: str
    workload_args: dict[str, Any] = Field(default_factory=dict)
    steps: int = Field(gt=0)
    abort_after: int = Field(default=10, gt=0)
    #: workers one trial may kill (SIGKILL, OOM) before it is recorded ``failed``
    max_attempts: int = Field(default=3, gt=0)
    layer_every: int = Field(default=50, gt=0)
    #: replay each broken trial to name the Cell that produced inf/NaN (or departed from FP32)
    localize: bool = True
    grid: Grid = Field(default_factory=Grid)
    devices: str | list[str] = "auto"
    #: ``grid`` runs every point; ``adaptive`` finds the minimal black list itself
    search: Literal["grid", "adaptive"] = "grid"
    #: ``adaptive``: at most this many classes are added to the black list
    search_rounds: int = Field(default=6, gt=0)
    confirm: Confirm = Field(default_factory=Confirm)
    #: fork every trial from a snapshot instead of step 0 (a late divergence)
    start_from: StartFrom | None = None
    #: the length of the user's real training, as a global step: before the answer is final, the
    #: recommended configuration (and each runner-up that would replace it) continues from its own
    #: snapshot to this step. None: where the trials end (``steps``, after ``start_from``'s)
    horizon: int | None = Field(default=None, gt=0)
    #: a trial is a data-parallel run on this many devices (a gang of rank actors); each batch the
    #: workload yields is the global batch, split evenly along its first axis across the ranks
    devices_per_trial: int = Field(default=1, ge=1)
    #: where a gang's devices may lie: ``STRICT_PACK`` on one node (one HCCL/NCCL ring), ``PACK`` across nodes
    placement_strategy: Literal["STRICT_PACK", "PACK"] = "STRICT_PACK"
    #: seconds a gang's rank may stay behind its peers without moving before its trial fails, naming it
    #: (None: 20 times the gang's median step, at least 60 s); ampsweep's own bound, which fires before
    #: the collective's (CPU about 30 s, HCCL_EXEC_TIMEOUT 1,836 s, NCCL maybe never)
    stall_timeout_s: float | None = Field(default=None, gt=0)
    #: ``search: adaptive``: workload arguments that fix a break where the search would otherwise add a
    #: class to the black list, e.g. ``{softmax_dtype: float32}`` (tried first, in the order written)
    remedies: dict[str, Any] = Field(default_factory=dict)
    #: devices no trial runs on, ``node:device_id`` as the report names a suspect device
    avoid_devices: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("name must be letters, digits, '.', '_' or '-' (it becomes a folder)")
        return value

    @field_validator("devices")
    @classmethod
    def _device_kinds(cls, value: str | list[str]) -> str | list[str]:
        listed = [] if value == "auto" else [value] if isinstance(value, str) else value or [""]
        if any(kind not in ("ascend", "gpu", "cpu") for kind in listed) or len(set(listed)) != len(listed):
            raise ValueError("allowed: auto, ascend, gpu, cpu, or a list of distinct ascend, gpu, cpu")
        return value

    @field_validator("avoid_devices")
    @classmethod
    def _device_form(cls, values: list[str]) -> list[str]:
        found = [_DEVICE.match(value) for value in values]
        if not all(found):
            raise ValueError(
                "each entry is 'node:device_id' as the report names a suspect device, e.g. '3f2a9c01b7de:3' "
                "(node: Ray's node id or its first 12 characters; device_id: empty on CPU, '3f2a9c01b7de:')"
            )
        return [f"{m[1][:12]}:{m[2]}" for m in found if m]  # the node as the trials table holds it

    @field_validator("workload")
    @classmethod
    def _reference_form(cls, value: str) -> str:
        try:
            parse_reference(value)
        except ReferenceFormError as exc:
            raise ValueError(str(exc)) from None
        return value


def _plain(value: Any) -> bool:
    """A YAML scalar (string, number, bool, null) or a list of plain values: what a value's text can name."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, list) and all(_plain(v) for v in value)


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif str(part).startswith(("literal[", "list[", "float", "none", "int", "str")):
            continue  # pydantic's union-branch labels say nothing to a user
        else:
            path += f".{part}" if path else str(part)
    return path


def _allowed_from(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return "unknown key (check the spelling; see docs/spec.md)"
    if error["type"] == "missing":
        return "this field is required"
    return message[0].lower() + message[1:]


def validation_error_to_spec_error(exc: ValidationError) -> SpecError:
    """The first pydantic error as one line: field, bad value, what is allowed."""
    error = exc.errors()[0]
    value = None if error["type"] == "missing" else error.get("input")
    return SpecError(_field_path(tuple(error["loc"])) or "spec", value, _allowed_from(error))


def parse_spec(data: Any) -> SweepSpec:
    """Validate already-loaded YAML data."""
    if not isinstance(data, dict):
        raise SpecError("spec", data, "the file must be a YAML mapping with name, workload, steps and grid")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_spec_error(exc) from None
    _check_search(spec)
    _check_horizon(spec)
    _check_workload_args(spec)
    if spec.horizon is None:
        spec.horizon = trials_end(spec)  # the resolved spec says where the answer must hold
    return spec


def trials_end(spec: SweepSpec) -> int | None:
    """The global step the grid's trials end at; None where a checkpoint decides where they start."""
    start = spec.start_from
    if start is None:
        return spec.steps
    if start.steps is not None:
        return start.steps + spec.steps
    return None if start.step is None else start.step + spec.steps


def _check_horizon(spec: SweepSpec) -> None:
    """A horizon before the trials' end would ask for less than the sweep already runs."""
    end = trials_end(spec)
    if spec.horizon is not None and end is not None and spec.horizon < end:
        raise SpecError(
            "horizon",
            spec.horizon,
            f"a global step >= {end:,}, where the trials end (the length of your real training)",
        )
    if spec.horizon is not None and end is not None and spec.horizon > end and spec.search == "adaptive":
        raise SpecError(
            "horizon",
            spec.horizon,
            f"at most {end:,} with search: adaptive (its confirmation round runs confirm.steps_factor "
            "times longer); use search: grid to continue the answer to the horizon",
        )


def _check_workload_args(spec: SweepSpec) -> None:
    """Each swept argument's values are plain, distinct and at least one; and an argument is fixed
    (``workload_args``), swept (``grid.workload_args``) or a remedy: one of them."""
    for name, values in spec.grid.workload_args.items():
        field = f"grid.workload_args.{name}"
        if not values:
            raise SpecError(field, values, "a list of at least one value")
        seen: set[str] = set()
        for value in values:
            if not _plain(value):
                raise SpecError(
                    field, value, "a plain YAML value: a string, number, true/false, null, or a list of those"
                )
            if arg_text(value) in seen:
                raise SpecError(field, values, f"distinct values ({value!r} appears twice; a typo?)")
            seen.add(arg_text(value))
        if name in spec.workload_args:
            raise SpecError(
                f"grid.workload_args.{name}",
                name,
                "an argument is either fixed (top-level workload_args) or swept (grid.workload_args), "
                "not both; remove it from one",
            )
    for name, value in spec.remedies.items():
        if not _plain(value):
            raise SpecError(
                f"remedies.{name}", value, "a plain YAML value (string, number, true/false, null, list)"
            )
        if name in spec.grid.workload_args:
            raise SpecError(
                f"remedies.{name}",
                name,
                "a remedy is an argument the adaptive search sets where a configuration breaks; "
                "this one is already swept in grid.workload_args",
            )
    if spec.remedies and spec.search != "adaptive":
        raise SpecError(
            "remedies",
            dict(spec.remedies),
            "remedies are tried by search: adaptive only; with search: grid, sweep the argument in grid.workload_args",
        )


def _check_search(spec: SweepSpec) -> None:
    """What ``search: adaptive`` needs of the grid."""
    if spec.search != "adaptive":
        return
    if spec.grid.black_list != [[]]:
        raise SpecError(
            "grid.black_list",
            spec.grid.black_list,
            "search: adaptive finds the black list itself; leave grid.black_list out "
            "(or use search: grid to test the lists you wrote)",
        )
    if all(level == FP32_LEVEL for level in spec.grid.amp_level):
        raise SpecError(
            "grid.amp_level",
            spec.grid.amp_level,
            "search: adaptive needs a mixed-precision level (O1, O2 or O3)",
        )


def read_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError("spec", str(path), f"the file cannot be read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError("spec", str(path), f"the file is not valid YAML{where}") from None
    return parse_spec(data)
