"""The shape DESIGN.md promises: one namespace, folders by concept, arrows one way, no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
#: part of the ``ampsweep`` namespace -> its folder in the repository
PARTS = {
    "contracts": ROOT / "ampsweep" / "contracts",
    "jobs": ROOT / "jobs",
    "analysis": ROOT / "analysis",
    "sweep": ROOT / "sweep",
}
#: which parts each part may import (DESIGN.md: sweep -> jobs, analysis; all -> contracts)
MAY_IMPORT = {
    "contracts": set(),
    "jobs": {"contracts"},
    "analysis": {"contracts"},
    "sweep": {"contracts", "jobs", "analysis"},
}
#: part -> the concept folders inside it (DESIGN.md: "Inside each part, folders by concept")
CONCEPTS = {
    "analysis": {"compute", "wording", "render"},
    "jobs": {"training", "localization", "watch", "profiling", "workloads"},
    "sweep": {"planning", "scheduling", "cluster", "store", "search", "devices"},
}


def _module_name(part: str, path: Path) -> str:
    rel = path.relative_to(PARTS[part]).with_suffix("")
    names = [n for n in rel.parts if n != "__init__"]
    return ".".join(["ampsweep", part, *names])


def _modules() -> dict[str, Path]:
    return {
        _module_name(part, path): path
        for part, folder in PARTS.items()
        for path in sorted(folder.rglob("*.py"))
    }


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every module ``name`` imports, absolute; in-function and TYPE_CHECKING imports count too.

    ``from pkg import sub`` counts as importing ``pkg.sub`` when that is a module, else ``pkg``.
    """
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    names = set(modules)
    return {
        name: {m for m in _imports(name, path, names) if m in names and m != name}
        for name, path in modules.items()
    }


def _part(module: str) -> str:
    return module.split(".")[1]


def test_nothing_outside_the_namespace_is_packaged():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"ampsweep.sweep" = "sweep"' in text and '"ampsweep.jobs" = "jobs"' in text
    assert not (ROOT / "ampsweep_contracts").exists()
    for path in [p for folder in PARTS.values() for p in folder.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] not in {"sweep", "jobs", "analysis"}, (
                    f"{path.relative_to(ROOT)} imports the bare {node.module}"
                )


@pytest.mark.parametrize("part", sorted(CONCEPTS))
def test_each_part_is_grouped_into_its_concept_folders(part):
    folders = {p.parent.name for p in PARTS[part].glob("*/__init__.py")}
    assert folders == CONCEPTS[part]


def test_dependencies_point_one_way():
    for module, targets in _graph().items():
        for target in targets:
            if _part(target) != _part(module):
                assert _part(target) in MAY_IMPORT[_part(module)], f"{module} imports {target}"


def test_the_driver_uses_only_what_jobs_exports():
    for module, targets in _graph().items():
        if _part(module) == "sweep":
            for target in targets:
                if _part(target) == "jobs":
                    assert target == "ampsweep.jobs" or target.startswith("ampsweep.jobs.workloads"), (
                        f"{module} imports the private {target}"
                    )


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*trail, nxt])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def _package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> module edges, less each package's ``__init__`` re-exporting its own children."""
    return {
        module: {
            t
            for t in targets
            if not (t.startswith(module + ".") and _modules()[module].name == "__init__.py")
        }
        for module, targets in graph.items()
    }


def test_no_package_has_an_import_circle():
    cycle = _cycle(_package_edges(_graph()))
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


def test_the_circle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


#: inside analysis, the concept folders that each may not import (DESIGN.md: "arrows one way"):
#: compute makes numbers and typed results, wording words them, render formats both
ANALYSIS_MAY_NOT_IMPORT = {
    "compute": {"wording", "render"},
    "wording": {"render"},
    "render": {"compute"},
}


def _analysis_folder(module: str) -> str | None:
    """'compute' for ``ampsweep.analysis.compute._rank``; None for a module at the top of analysis."""
    names = module.split(".")
    return names[2] if names[:2] == ["ampsweep", "analysis"] and len(names) > 3 else None


@pytest.mark.parametrize("folder", sorted(ANALYSIS_MAY_NOT_IMPORT))
def test_analysis_arrows_point_one_way(folder):
    """compute imports neither wording nor render; wording does not import render; render reads the model
    and the words, never the code that computed them."""
    graph = _graph()
    modules = [m for m in graph if _analysis_folder(m) == folder]
    assert modules, f"no module under analysis/{folder}"
    for module in modules:
        for target in graph[module]:
            assert _analysis_folder(target) not in ANALYSIS_MAY_NOT_IMPORT[folder], (
                f"{module} imports {target}"
            )


def test_the_analysis_arrow_check_sees_the_folders():
    """The graph resolves ``from ..compute._anomalies import ...`` to the module in its folder, so an arrow
    the wrong way (compute -> wording) would show up as one."""
    graph = _graph()
    assert "ampsweep.analysis.compute._anomalies" in graph["ampsweep.analysis.wording._localization"]
    assert _analysis_folder("ampsweep.analysis.wording._localization") == "wording"
    assert _analysis_folder("ampsweep.analysis._model") is None
    assert _analysis_folder("ampsweep.analysis.compute") is None  # a package's __init__ sits above its folder


@pytest.mark.parametrize("part", ["analysis", "contracts", "jobs", "sweep"])
def test_a_name_another_module_uses_is_public(part):
    """``from ._x import _y`` across modules is refused: a name other modules use is its owner's public
    name (importing a private *module*, ``from . import _classes``, is how the package is laid out)."""
    for path in PARTS[part].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            folder = path.parents[node.level - 1].joinpath(*(node.module or "").split("."))
            private = [
                a.name
                for a in node.names
                if a.name.startswith("_") and not (folder / f"{a.name}.py").exists()
            ]
            assert not private, f"{path.relative_to(ROOT)} imports the private {private} from {node.module}"
