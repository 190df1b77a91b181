"""A configuration: everything the user chooses for a trial except the seed, as one value, and its name.

The driver plans trials by it, the horizon continues it and the analysis groups seeds, names rows and
finds a row's neighbours by it, so "the same configuration" means one thing in ``plan.json``,
``horizon.json``, ``ranking.csv`` and the report. Values are normalized on construction: a Parquet row, a
ranking row and a spec give equal configurations exactly when they are the same choice. The names every
output uses ("O2 · FP32: CustomNorm · clip 5.0"; O0 is "FP32") are described in docs/ranking.md ("What a
person sees first"); swept workload arguments and precision knobs in docs/spec.md. Plain values in, text
out (no pandas), so every part can import it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from ._loss_scale import parse_loss_scale
from ._numbers import number
from ._verdict import FP32_LEVEL

NAME_SEPARATOR = " · "
FP32_NAME = "FP32"
DEFAULT_DTYPE = "float16"
#: where the loss runs: outside the cast network (the default) or inside it, with the network; a trial
#: written before the ``loss_placement`` column ran it inside (the loader says so, once)
LOSS_OUTSIDE, LOSS_INSIDE = "outside", "inside"
#: the parts a name spells only when asked: those that differ between the rows shown
OPTIONAL_PARTS = frozenset({"dtype", "loss_placement", "device_kind"})


#: the trials table's column of a swept workload argument is this prefix and its name
ARG_COLUMN_PREFIX = "arg_"
#: float dtype names, as a factory's argument spells them: an argument with such values is a precision knob
FLOAT_DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "fp16", "bf16", "fp32", "fp64"})
_FLOAT32_NAMES = frozenset({"float32", "fp32", "float64", "fp64"})
_DTYPE_PREFIX = re.compile(r"^(mindspore\.|mstype\.|ms\.)")

#: a swept workload argument of a configuration: its name and its value's text (:func:`arg_text`)
WorkloadArg = tuple[str, str]


def arg_column(name: str) -> str:
    """The trials table's column of a swept workload argument: ``arg_softmax_dtype``."""
    return f"{ARG_COLUMN_PREFIX}{name}"


def arg_text(value: Any) -> str:
    """A workload argument's value as the user typed it in YAML: 'float32', '0.001', 'true', '[2, 4]'.

    Text is what identifies the value everywhere (a column, a name, a ranking
    row), so a value read back from Parquet equals the one the spec gave.
    """
    if isinstance(value, str):
        return value
    return json.dumps(value)


def dtype_name(text: str) -> str | None:
    """'float16' for 'float16', 'mstype.float16' or 'fp16'-like names; None when ``text`` is no float dtype."""
    name = _DTYPE_PREFIX.sub("", str(text).strip().lower())
    return name if name in FLOAT_DTYPE_NAMES else None


def is_float32(value: Any) -> bool:
    """Whether ``value`` names float32 (or wider): 'float32', 'mstype.float32', 'fp32', 'float64'."""
    return dtype_name(str(value)) in _FLOAT32_NAMES


def is_precision_knob(values: Sequence[Any]) -> bool:
    """Whether a swept argument sets a precision: every value is a float dtype name."""
    return bool(values) and all(isinstance(v, str) and dtype_name(v) is not None for v in values)


def reference_value(values: Sequence[Any]) -> Any | None:
    """The value of a swept argument that the FP32 reference uses: float32 for a precision knob
    (None when it has no float32 value), else None: the reference then matches each trial's own value."""
    if not is_precision_knob(values):
        return None
    return next((v for v in values if is_float32(v)), None)


def workload_args_of(value: Any) -> tuple[WorkloadArg, ...]:
    """Swept workload arguments from any form a table or a spec holds them in, sorted by name.

    A mapping or ``(name, value)`` pairs; ``"a=x, b=y"`` (ranking.csv's text);
    None, NaN or ``""`` for none.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)) or value in ("", "none"):
        return ()
    if isinstance(value, str):
        value = [part.split("=", 1) for part in re.split(r", (?=[A-Za-z_][A-Za-z0-9_]*=)", value)]
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(name), arg_text(v)) for name, v in items))


def workload_args_value(workload_args: Iterable[WorkloadArg]) -> str:
    """'softmax_dtype=float32, lr=0.001' (name order); 'none' when no argument is swept."""
    return ", ".join(f"{name}={value}" for name, value in workload_args) or "none"


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA: a clip that is off."""
    return number(value) is None


def clip_value(clip: Any) -> str:
    """The threshold as the user typed it in the spec: '5.0', '0.25'; 'off' when there is none."""
    return "off" if missing(clip) else repr(float(clip))


def clip_name(clip: Any) -> str:
    """'clip 5.0', or 'no clip'."""
    return "no clip" if missing(clip) else f"clip {clip_value(clip)}"


def black_list_value(black_list: Iterable[Any] | None) -> str:
    """'CustomNorm, ExpSoftmax'; 'none' for an empty black list."""
    return ", ".join(str(c) for c in black_list or ()) or "none"


def loss_scale_name(loss_scale: Any) -> str:
    """'loss scale dynamic', 'loss scale static:1024'; 'no loss scaling'."""
    scaled = loss_scale is not None and str(loss_scale) not in ("", "none")
    return f"loss scale {loss_scale}" if scaled else "no loss scaling"


def loss_placement_name(loss_placement: Any) -> str:
    """'loss outside' / 'loss inside' (where the loss runs: outside or inside the cast)."""
    return f"loss {loss_placement}"


def level_name(amp_level: Any, dtype: Any = DEFAULT_DTYPE, *, spell_dtype: bool = False) -> str:
    """'FP32' for O0; 'O2'; 'O2 bfloat16' when the dtype is not float16 (or ``spell_dtype``)."""
    level = str(amp_level)
    if level == FP32_LEVEL:
        return FP32_NAME
    if spell_dtype or (dtype is not None and str(dtype) != DEFAULT_DTYPE):
        return f"{level} {dtype}"
    return level


def black_list_of(value: Any) -> tuple[str, ...]:
    """A black list from any form a table or a spec holds it in, sorted and deduplicated.

    None, NaN and ``""`` are the empty list; a list, tuple or NumPy array holds
    class names; a string is one class name, or a ``black_list_key`` label
    (``"[A, B]"``, as older ranking.csv files carry).
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ()
    if isinstance(value, str):
        value = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
    return tuple(sorted({str(name).strip() for name in value} - {""}))


def _text(value: Any, default: str) -> str:
    if isinstance(value, str):
        return value or default
    return default if missing(value) else str(value)


@dataclass(frozen=True)
class Configuration:
    """Everything the user chooses except the seed; hashable, so the instance is its own key.

    ``device_kind`` is known only once a trial ran (a configuration is ranked
    per device kind); it is ``""`` at plan time.
    """

    amp_level: str
    black_list: tuple[str, ...] = ()
    clip: float | None = None
    loss_scale: str = "none"
    dtype: str = DEFAULT_DTYPE
    loss_placement: str = LOSS_OUTSIDE
    device_kind: str = ""
    #: the workload's own swept arguments (``grid.workload_args``): ``(name, value text)`` sorted by name
    workload_args: tuple[WorkloadArg, ...] = ()

    #: every field, in the order a user chooses them (and a table row carries them): set below the class
    FIELDS: ClassVar[tuple[str, ...]]

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "amp_level", str(self.amp_level))
        set_(self, "black_list", black_list_of(self.black_list))
        set_(self, "clip", None if missing(self.clip) else float(self.clip))  # type: ignore[arg-type]
        set_(self, "workload_args", workload_args_of(self.workload_args))
        for field in fields(self):
            if isinstance(field.default, str):  # a text field: empty or missing takes its default
                set_(self, field.name, _text(getattr(self, field.name), field.default))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Configuration:
        """The configuration of a trials or ranking row, a ``config`` dict or a spec-like mapping.

        Missing keys take their defaults; a row with only ``black_list_key`` (a
        label) is read from it; a trials row's ``arg_<name>`` columns are its
        swept workload arguments (a null one: not swept for that row).
        """
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        if "black_list" not in values and "black_list_key" in row:
            values["black_list"] = row["black_list_key"]
        if "workload_args" not in values:
            values["workload_args"] = {
                key[len(ARG_COLUMN_PREFIX) :]: value
                for key, value in row.items()
                if str(key).startswith(ARG_COLUMN_PREFIX) and not (value is None or value != value)
            }
        return cls(**values)

    def as_row(self) -> dict[str, Any]:
        """The columns a table row carries (``black_list`` a tuple, ``clip`` None when off)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    @property
    def key(self) -> tuple[Any, ...]:
        """The configuration as a plain, comparable, hashable tuple (:data:`FIELDS` order)."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    @property
    def fp32(self) -> bool:
        """O0: nothing is cast (the black list, dtype and loss placement change nothing)."""
        return self.amp_level == FP32_LEVEL

    @property
    def computes_in_fp32(self) -> bool:
        """The FP32 baseline: O0, with no swept argument that makes the workload compute in a low precision.
        ``O0 · compute_dtype=float16`` (mindformers' way, no AMP) is a mixed-precision candidate instead."""
        return self.fp32 and not self.low_precision_args

    @property
    def low_precision_args(self) -> tuple[WorkloadArg, ...]:
        """The swept arguments that make the workload itself compute in a low precision (``compute_dtype=float16``)."""
        return tuple(
            (name, value)
            for name, value in self.workload_args
            if dtype_name(value) is not None and not is_float32(value)
        )

    def args_name(self) -> str:
        """'softmax_dtype=float32, lr=0.001': the swept arguments in the user's words; '' when none."""
        return ", ".join(f"{name}={value}" for name, value in self.workload_args)

    @property
    def id(self) -> str:
        """Every part spelled: the stable key of ranking.csv and recommendation.json,
        e.g. 'O2 float16 · FP32: A · clip 5.0 · loss outside · on gpu'."""
        return self.name(OPTIONAL_PARTS)

    def name(self, spell: Iterable[str] = ()) -> str:
        """'O2 · FP32: CustomNorm · clip 5.0', 'FP32', 'FP32 · loss scale dynamic', 'O2 bfloat16 · no clip'.

        ``spell``: which optional parts to name ("dtype", "loss_placement",
        "device_kind"): those that differ between the rows shown. A non-float16
        dtype is always named. **O0 is FP32**: its name has no black list,
        dtype or loss placement, and a clip only when one was set.
        """
        spelled = frozenset(spell)
        parts = [self.settings_name(spell_dtype="dtype" in spelled)]
        if not self.fp32 or self.clip is not None:
            parts.append(clip_name(self.clip))
        if self.loss_scale != "none":
            parts.append(loss_scale_name(self.loss_scale))
        if "loss_placement" in spelled and not self.fp32:
            parts.append(loss_placement_name(self.loss_placement))
        if "device_kind" in spelled:
            parts.append(f"on {self.device_kind or 'an unknown device kind'}")
        return NAME_SEPARATOR.join(parts)

    def cast_name(self, *, spell_dtype: bool = False) -> str:
        """What is cast and what stays in FP32: 'O2 · FP32: CustomNorm', 'O2', 'FP32' (O0 casts nothing;
        'O0' where a swept argument makes the workload compute in a low precision itself)."""
        if self.fp32 and self.low_precision_args:
            return FP32_LEVEL
        level = level_name(self.amp_level, self.dtype, spell_dtype=spell_dtype)
        if not self.black_list or self.fp32:
            return level
        return f"{level}{NAME_SEPARATOR}{FP32_NAME}: {', '.join(self.black_list)}"

    def settings_name(self, *, spell_dtype: bool = False) -> str:
        """What is cast, what stays in FP32 and the swept workload arguments, without the clip and the
        scale: 'O2 · FP32: CustomNorm', 'O2 · softmax_dtype=float32' (a row of the divergence map)."""
        return NAME_SEPARATOR.join(
            [self.cast_name(spell_dtype=spell_dtype), *(f"{n}={v}" for n, v in self.workload_args)]
        )

    def trial_name(self, seed: Any, spell: Iterable[str] = ()) -> str:
        """One trial of it: 'O2 · FP32: A · clip 5.0 · seed 0' ('seed unknown' where none was recorded)."""
        return f"{self.name(spell)}{NAME_SEPARATOR}seed {'unknown' if missing(seed) else int(seed)}"

    def with_black_list(self, classes: Iterable[str]) -> Configuration:
        """The same configuration keeping ``classes`` in FP32 instead."""
        return replace(self, black_list=tuple(classes))

    def with_device_kind(self, device_kind: str) -> Configuration:
        return replace(self, device_kind=device_kind)

    def graph_fields(self) -> dict[str, Any]:
        """The fields that decide the compiled graph (with the workload); the clip is state, not graph.

        O0 casts nothing: every black list, dtype and loss placement builds the
        same FP32 graph, so they are left out and one compile serves them all.
        The loss scale counts by its kind (none, static, dynamic): a static
        scale's value is state, not graph.
        """
        graph: dict[str, Any] = {"amp_level": self.amp_level}
        if not self.fp32:
            graph.update(
                black_list=list(self.black_list), dtype=self.dtype, loss_placement=self.loss_placement
            )
        graph["loss_scale"] = parse_loss_scale(self.loss_scale).kind
        return graph


Configuration.FIELDS = tuple(field.name for field in fields(Configuration))
