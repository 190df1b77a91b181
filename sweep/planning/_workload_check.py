"""The part of validation that needs the workload, built once on the driver: the only way to know which
Cell classes a user's model contains, and it catches an import error before any worker starts."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampsweep.jobs import (
    WorkloadError,
    build_workload,
    known_layer_types,
    load_factory,
    network_cell_types,
    resolve_reference,
)

from .._errors import SpecError, SpecFailed
from ._spec import SweepSpec
from ._start import Starts


@dataclass(frozen=True)
class WorkloadFacts:
    """What the driver learns from building the workload once."""

    #: the reference, resolved so it means the same file in every process
    reference: str
    #: the workload's own Cell classes (network and loss), what a black list may name
    own_classes: tuple[str, ...]
    #: classes found only in the loss: under ``loss_placement: outside`` they compute in float32 anyway
    loss_only_classes: frozenset[str]
    #: where each seed's trials start (``start_from``), the user's checkpoint checked against the network
    starts: Starts


def resolve_workload(spec: SweepSpec, spec_dir: Path | None) -> str:
    """The workload reference made absolute, or ``SpecError`` (a missing file: cheap, no import)."""
    try:
        return resolve_reference(spec.workload, spec_dir)
    except WorkloadError as exc:
        raise SpecError("workload", spec.workload, str(exc).split(": ", 1)[-1]) from None


def check_workload(spec: SweepSpec, spec_dir: Path | None) -> WorkloadFacts:
    """Resolve and build the workload once, check the black-list names; or raise ``SpecError``."""
    reference = resolve_workload(spec, spec_dir)
    try:
        factory = load_factory(reference)
    except WorkloadError as exc:
        raise _refused(spec, exc) from None
    _check_argument_names(spec, factory)
    first = {name: values[0] for name, values in spec.grid.workload_args.items()}
    try:
        workload = build_workload(reference, spec.grid.seed[0], {**spec.workload_args, **first})
    except WorkloadError as exc:
        raise _refused(spec, exc) from None
    except TypeError as exc:
        raise SpecError("workload_args", spec.workload_args, f"the factory rejected them ({exc})") from None
    except Exception as exc:  # the user's factory itself raised
        raise SpecFailed(
            "workload", spec.workload, f"calling {spec.workload!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    cells = [workload.network, workload.loss_fn]
    _check_black_lists(spec, cells)
    _check_enough_batches(spec, workload.batches)
    _check_global_batch(spec, workload.batches)
    in_network, in_loss = (set(network_cell_types([cell])) for cell in cells)
    starts = Starts(spec, workload, spec_dir)
    return WorkloadFacts(
        reference, tuple(sorted(in_network | in_loss)), frozenset(in_loss - in_network), starts
    )


def _refused(spec: SweepSpec, exc: WorkloadError) -> SpecError:
    """An import that raised or a missing factory says what happened; a refused reference, what is allowed."""
    error = SpecFailed if exc.failed else SpecError
    return error("workload", spec.workload, str(exc).split(": ", 1)[-1])


#: what the sweep itself passes to every factory: never a user's axis
_OWN_ARGUMENTS = ("seed", "start_step")


def _check_argument_names(spec: SweepSpec, factory: Callable[..., Any]) -> None:
    """Every swept argument and remedy is a keyword argument the factory takes (any, with ``**kwargs``)."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin or C callable: its call says what it rejects
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    takes = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in _OWN_ARGUMENTS
    ]
    for section, names in (("grid.workload_args", spec.grid.workload_args), ("remedies", spec.remedies)):
        for name in names:
            if name not in takes:
                raise SpecError(
                    f"{section}.{name}",
                    name,
                    f"a keyword argument of {spec.workload}: {', '.join(takes) or 'it takes none but seed'}",
                )


def _check_black_lists(spec: SweepSpec, cells: list[object]) -> None:
    """Every black-listed name is a Cell class (``isinstance``: a base class counts) that some Cell of the
    network or loss is. One with no instance (``Conv2d`` on a transformer) would keep nothing in FP32, and
    its trials would repeat the list without it under another name."""
    known = known_layer_types(cells)
    present = list(network_cell_types(cells).values())
    own = ", ".join(sorted(network_cell_types(cells)))
    for index, group in enumerate(spec.grid.black_list):
        for position, name in enumerate(group):
            field = f"grid.black_list[{index}][{position}]"
            if name not in known:
                raise SpecError(field, name, f"known layer types: {own} (or any Cell class in mindspore.nn)")
            if not any(issubclass(kind, known[name]) for kind in present):
                raise SpecError(
                    field,
                    name,
                    f"no Cell of the workload's network or loss is a {name}, so keeping it in FP32 would change "
                    f"nothing; its layer types: {own} (or a base class of one of them)",
                )


def _check_global_batch(spec: SweepSpec, batches: object) -> None:
    """On several devices, the first batch's rows must split evenly: known now, so refused now, before a gang
    forms and its trials fail (a dataset pipeline is left to the trial's own one-line failure)."""
    size = spec.devices_per_trial
    if size == 1:
        return
    if isinstance(batches, (list, tuple)):
        if not batches:
            return
        first = batches[0]
    elif isinstance(batches, types.GeneratorType):
        first = next(batches, None)  # this build is the driver's own, for checking: drawing from it is free
        if first is None:
            return
    else:
        return  # a dataset pipeline: its first batch would cost a pass of its pipeline
    items = first if isinstance(first, (list, tuple)) else (first,)
    shapes: list[tuple[int, ...]] = [tuple(getattr(item, "shape", ())) for item in items]
    rows = next((int(shape[0]) for shape in shapes if shape), None)
    if rows is not None and rows % size:
        raise SpecError(
            "devices_per_trial",
            size,
            f"a number that divides the workload's global batch of {rows} (each device trains on an equal part)",
        )


def _check_enough_batches(spec: SweepSpec, batches: object) -> None:
    """A list or tuple of batches shorter than a trial, refused now (a pipeline repeats, a generator's length
    is unknown; a fork's batches are the factory's, with ``start_step``: left to the trial)."""
    if spec.start_from is not None or not isinstance(batches, (list, tuple)):
        return
    longest = spec.steps * (spec.confirm.steps_factor if spec.search == "adaptive" else 1)
    if len(batches) < longest:
        what = f"{spec.steps} steps" + (
            " (its confirmation round trains longer)" if longest > spec.steps else ""
        )
        raise SpecError(
            "steps",
            spec.steps,
            f"the workload's batches are a {type(batches).__name__} of {len(batches)} and a trial needs "
            f"{longest} for {what}; ask for fewer steps, or yield batches without end",
        )
