"""The shape DESIGN.md promises: arrows one way, public boundaries, small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGES = ("ampsweep_contracts", "sweep", "jobs", "analysis")
MAX_LINES = 400


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file; level 0 = absolute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.level, node.module))
        elif isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
    return found


def _top(module: str) -> str:
    return module.split(".", 1)[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_the_size_limit(package):
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in _modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_dependencies_point_one_way():
    allowed = {
        "ampsweep_contracts": set(),
        "jobs": {"ampsweep_contracts"},
        "analysis": {"ampsweep_contracts"},
        "sweep": {"ampsweep_contracts", "jobs", "analysis"},
    }
    for package, may in allowed.items():
        for path in _modules(package):
            for level, module in _imports(path):
                if level == 0 and _top(module) in PACKAGES and _top(module) != package:
                    assert _top(module) in may, f"{path.relative_to(ROOT)} imports {module}"


def test_the_driver_uses_only_what_jobs_exports():
    for path in _modules("sweep"):
        for level, module in _imports(path):
            if level == 0 and _top(module) == "jobs":
                assert module == "jobs" or module.startswith("jobs.workloads"), (
                    f"{path.relative_to(ROOT)} imports the private {module}"
                )


def test_analysis_has_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for path in _modules("analysis"):
        graph[path.stem] = {module for level, module in _imports(path) if level == 1}
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> None:
        visiting.add(node)
        for nxt in graph.get(node, ()):
            assert nxt not in visiting, f"import cycle: {' -> '.join([*trail, nxt])}"
            if nxt not in done:
                visit(nxt, [*trail, nxt])
        visiting.discard(node)
        done.add(node)

    for node in graph:
        if node not in done:
            visit(node, [node])
