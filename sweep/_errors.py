"""The errors a user sees: one line each, naming what happened and what to do.

``SpecError`` is bad input (exit code 2, nothing written); ``SpecFailed`` is input that could not be
used because something failed; ``SweepStopped`` is a run that could not go on, and always says how to
resume. The CLI's exit codes are listed in ``docs/cli.md``.
"""

from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ampsweep.jobs import TrialResult


class SpecError(ValueError):
    """A sweep file (or CLI flag) that does not validate; the CLI exits with code 2."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = " ".join(allowed.split())  # one line, whatever a user's exception printed
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.field}: {self.value!r} is not allowed; {self.allowed}"


class SpecFailed(SpecError):
    """Input that could not be used because something failed, e.g. importing the workload: exit code 2.
    The line says what happened, not that a value is disallowed; ``allowed`` holds that text."""

    def line(self) -> str:
        return f"{self.field}: {self.allowed}"


class SweepStopped(RuntimeError):
    """A run that stopped before its last trial; committed trials are kept."""

    #: exit code of the CLI
    exit_code = 3

    def __init__(self, what: str, committed: int, left: int | None, detail: str | None = None) -> None:
        self.what = what
        self.committed = committed
        #: trials not committed yet; None where that is not known (``OutOfSpace`` without a plan file)
        self.left = left
        #: more lines (e.g. the workload's traceback), printed before the one-line summary
        self.detail = detail
        counts = f"{committed} trials are committed" + (f", {left} left" if left is not None else "")
        super().__init__(f"{what}; {counts}")


class ClusterLost(SweepStopped):
    """The Ray cluster (head, or the local raylet) stopped answering."""


class WorkloadBroken(SweepStopped):
    """The first trials, the FP32 baseline among them, all failed with the same exception."""


class PrefixFailed(SweepStopped):
    """An FP32 prefix of ``start_from: {steps: N}`` did not reach step N: nothing to fork from."""


def warn(message: str) -> None:
    """One line on stderr that does not stop the run."""
    print(f"ampsweep: {message}", file=sys.stderr, flush=True)


#: ``errno`` values that mean the filesystem cannot take more bytes: full, or over the user's quota
NO_SPACE_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None
)


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` saying the filesystem is full or over quota (ENOSPC, EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


class OutOfSpace(SweepStopped):
    """A file of the sweep folder could not be written: its filesystem is full or over quota (the file
    is removed, the lock released; the same command resumes once there is space)."""

    exit_code = 4


class Interrupted(SweepStopped):
    """Ctrl-C (SIGINT) or SIGTERM of the driver."""

    exit_code = 130


def workload_frame(traceback_text: str | None) -> str:
    """The last traceback frame outside ampsweep, MindSpore and the standard library: the user's line."""
    if not traceback_text:
        return ""
    lines = traceback_text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    skip = ("/jobs/_", "/sweep/", "site-packages", "/lib/python3")
    for index in reversed(frames):
        if not any(part in lines[index] for part in skip):
            code = lines[index + 1].strip() if index + 1 < len(lines) else ""
            return f"{lines[index].strip()}\n    {code}".rstrip()
    return ""


def check_first_trials(early: list[TrialResult], committed: int, left: int) -> None:
    """Raise ``WorkloadBroken`` when the first trials, the FP32 baseline among them, all failed alike
    (``left``: the trials not committed, these included)."""
    from ampsweep.contracts import FP32_LEVEL, Outcome

    errors = {r.error for r in early}
    all_failed = all(r.outcome == Outcome.FAILED for r in early)
    baseline = any(r.config.amp_level == FP32_LEVEL for r in early)
    if all_failed and len(errors) == 1 and baseline and early[0].error:
        where = workload_frame(early[0].traceback)
        detail = f"{early[0].error}" + (f"\n  {where}" if where else "")
        raise WorkloadBroken(
            f"the workload is broken: the first {len(early)} trials, the FP32 baseline among them, "
            "all failed with the same exception (fix it and run again, or pass --keep-going)",
            committed,
            left,
            detail,
        )
