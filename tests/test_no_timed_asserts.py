"""No test asserts how long something took: speed belongs in ``benchmarks/``.

A bound on wall-clock time fails on a slow or loaded machine (CI, 2 cores, a
neighbour's job) while the code is fine. A test checks behaviour; a generous
timeout that only stops a hung run (``subprocess.run(timeout=...)``,
``tests._wait.wait_until``) is not an assertion and is allowed.

The check reads each ``tests/*.py`` with ``ast``: an ``assert`` may not compare,
with ``<``, ``<=``, ``>`` or ``>=``, a non-zero number against something timed —
a ``time.time()``/``time.monotonic()``/``time.perf_counter()`` call, a name
assigned from one in the same function, or a name, attribute or string key
naming a duration (``elapsed``, ``duration``, ``waited``, ``*_ms``,
``wall_s``, ``compile_s``). Sign checks (``compile_s > 0``) and orderings of two stamps
are behaviour, and pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._wait import wait_until

TESTS = Path(__file__).parent
CLOCKS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
DURATION = re.compile(r"elapsed|duration|waited|(_ms|wall_s|compile_s)(?![a-z0-9])", re.IGNORECASE)
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in CLOCKS  # from time import monotonic


def _timed(node: ast.AST, tainted: set[str]) -> bool:
    """Whether ``node`` is computed from a clock reading or names a duration."""
    for sub in ast.walk(node):
        if _is_clock_call(sub):
            return True
        if isinstance(sub, ast.Name) and (sub.id in tainted or DURATION.search(sub.id)):
            return True
        if isinstance(sub, ast.Attribute) and DURATION.search(sub.attr):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _is_key(sub.value):
            return True  # a column or key: steps["step_ms"], table.column("wall_s")
    return False


def _is_key(text: str) -> bool:
    """A column or key that names a duration: ``"step_ms"``, ``"wall_s"`` (not prose like ``"elapsed 0:00"``)."""
    return text.isidentifier() and DURATION.search(text) is not None


def _nonzero_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and node.value != 0
    )


def _names(target: ast.AST) -> Iterator[str]:
    """The plain names an assignment binds (``t0``, ``a, b``); not ``self`` of ``self.t0``."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _names(element)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)


def _tainted(scope: ast.AST) -> set[str]:
    """Names assigned (in ``scope``) from a clock reading, or from another such name."""
    assigns: list[tuple[list[ast.AST], ast.AST]] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            assigns.append((node.targets, node.value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            assigns.append(([node.target], node.value))
    tainted: set[str] = set()
    grew = True
    while grew:
        grew = False
        for targets, value in assigns:
            if _timed_by_clock(value, tainted):
                new = {name for target in targets for name in _names(target)} - tainted
                if new:
                    tainted |= new
                    grew = True
    return tainted


def _timed_by_clock(node: ast.AST, tainted: set[str]) -> bool:
    return any(
        _is_clock_call(sub) or (isinstance(sub, ast.Name) and sub.id in tainted) for sub in ast.walk(node)
    )


def timed_asserts(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: assert ...`` for each assert in ``source`` that bounds a duration by a number."""
    tree = ast.parse(source, filename)
    scopes: list[ast.AST] = [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
    ]
    found: dict[tuple[int, int], str] = {}
    for scope in scopes:  # the module first, then each function with the names it assigned from a clock
        tainted = _tainted(scope) if scope is not tree else set()
        for node in ast.walk(scope):
            if not isinstance(node, ast.Assert) or (node.lineno, node.col_offset) in found:
                continue
            for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                operands = [compare.left, *compare.comparators]
                for op, left, right in zip(compare.ops, operands, operands[1:]):
                    if not isinstance(op, ORDERING):
                        continue
                    if (_nonzero_number(right) and _timed(left, tainted)) or (
                        _nonzero_number(left) and _timed(right, tainted)
                    ):
                        found[(node.lineno, node.col_offset)] = (
                            f"{filename}:{node.lineno}: {ast.unparse(node)}"
                        )
    return [found[key] for key in sorted(found)]


# the tree ---------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(TESTS.glob("*.py")), ids=lambda p: p.name)
def test_no_test_asserts_a_duration(path: Path) -> None:
    found = timed_asserts(path.read_text(), path.name)
    assert not found, "speed belongs in benchmarks/, not in a test's assert:\n" + "\n".join(found)


# the checker ------------------------------------------------------------

TIMED = [
    "import time\nt0 = time.time()\nassert time.time() - t0 < 15\n",
    "def test():\n    pressed = time.monotonic()\n    stop()\n    assert time.monotonic() - pressed < 15, 'quick'\n",
    "def test():\n    t0 = time.perf_counter()\n    run()\n    took = time.perf_counter() - t0\n    assert took <= 2.5\n",
    "def test():\n    start = time.time()\n    run()\n    end = time.time()\n    span = end - start\n    assert 0 < span and span < 90\n",
    "assert 15 > time.time() - t0\n",
    "assert np.median(fixed.steps.column('step_ms').to_numpy()[1:]) < 30\n",
    "assert 2.0 <= result.wall_s < 10.0\n",
    "assert outcome.compile_s >= 1.5\n",
    "assert elapsed < 120\n",
    "waited, busy = wait_for_quiet(max_wait=2.0)\nassert 2.0 <= waited < 10.0\n",
    "assert trial.duration_s > -1\n",
    "assert ok and (steps['step_ms'] < 40).all()\n",
]

NOT_TIMED = [
    "assert outcome.compile_s > 0\n",
    "assert first.compile_s > 0 and second.compile_s == 0.0\n",
    "assert (steps['step_ms'] > 0).all() and np.isfinite(steps['step_ms']).all()\n",
    "assert trials['started_at'].max() <= trials['finished_at'].max()\n",
    "assert len(rows) < 12 and 3 <= len(before)\n",
    "assert 'elapsed 0:00:0' in last\n",
    "ran = subprocess.run(cmd, timeout=120)\nassert ran.returncode == 0\n",
    "wait_until(lambda: done.exists(), 300)\n",
    "def test():\n    deadline = time.time() + 120\n    assert count >= 3\n",
    "assert n_msgs > 3 and items_msk < 2\n",
    "assert time.time() > stamp\n",
    "def test():\n    self.started = time.time()\n    assert self.count > 3\n",
]


@pytest.mark.parametrize("source", TIMED)
def test_the_checker_finds_a_bound_on_a_duration(source: str) -> None:
    found = timed_asserts(source)
    assert len(found) == 1 and found[0].startswith("<test>:"), found


@pytest.mark.parametrize("source", NOT_TIMED)
def test_the_checker_passes_behaviour_and_hang_guards(source: str) -> None:
    assert timed_asserts(source) == []


# the one wait helper ----------------------------------------------------


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, "", "ready"])
    assert wait_until(lambda: next(answers), 60, interval=0.001) == "ready"


def test_wait_until_fails_naming_what_it_waited_for() -> None:
    calls = []
    with pytest.raises(AssertionError, match=r"^hung: waited 0 s for 3 committed rows$"):
        wait_until(lambda: calls.append(1), 0, message="3 committed rows")
    assert calls == [1], "called at least once, even with no time to wait"
    with pytest.raises(AssertionError, match="for the agent; last answer: busy"):
        wait_until(lambda: False, 0, message=lambda: "the agent; last answer: busy")

    def server_listening() -> bool:
        return False

    with pytest.raises(AssertionError, match="for server_listening"):
        wait_until(server_listening, 0)


def test_wait_until_lets_the_predicates_own_failure_through() -> None:
    def alive() -> bool:
        raise AssertionError("the driver exited (1)")

    with pytest.raises(AssertionError, match=r"the driver exited \(1\)"):
        wait_until(alive, 60)
