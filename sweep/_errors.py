"""The one error a user sees for bad input: a single line naming field, value and what is allowed."""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A sweep file (or CLI flag) that does not validate; the CLI exits with code 2."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = " ".join(allowed.split())  # one line, whatever a user's exception printed
        super().__init__(f"{field}: {value!r} is not allowed; {self.allowed}")
