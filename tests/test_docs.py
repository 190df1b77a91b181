"""The documentation: a short README that links into the site, every page in the navigation, and every
example in README.md and docs/ executed.

Fenced blocks are collected from README.md and docs/*.md. ``python`` blocks run in a fresh interpreter
(``sys.executable``, a temporary working directory, no ``PYTHONPATH``: only the installed package).
``yaml`` blocks are sweep specs: each must validate. HTML comments on the lines right above a fence mark it:

- ``<!-- slow: why -->``: the block runs a whole sweep, or reads the one the README's Python example writes
  (``runs/api-demo``); it runs under ``-m slow``, in the folder where that example ran.
- ``<!-- no-run: why -->``: not executed at all (e.g. it needs an Ascend cluster). Use sparingly.

``make docs`` (``mkdocs build --strict``) checks the links, the anchors and the generated pages.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PICTURE = DOCS / "img" / "report.png"
API_EXAMPLE_MARKER = "<!-- python-api-example:start -->"

#: the pages issue 18 asks for (beyond the home page), each in mkdocs.yml's nav
REQUIRED_PAGES = {
    "install.md": "install and supported versions",
    "spec.md": "the spec reference",
    "sweep-and-trial.md": "what a sweep and a trial do",
    "workloads.md": "workloads",
    "localization.md": "localization and search",
    "output.md": "output tables",
    "ranking.md": "ranking",
    "cli.md": "the CLI",
    "cluster.md": "running on a cluster",
    "benchmarks.md": "benchmarks",
    "api.md": "the API reference from docstrings",
    "late-divergence.md": "start_from: your own checkpoint, when a prefix pays off",
}

FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
MARKER = re.compile(r"^<!-- (?P<kind>slow|no-run): (?P<why>.+?) -->$")
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    markers: tuple[str, ...]  # the HTML comment lines right above the fence

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def marked(self, kind: str) -> bool:
        return any((m := MARKER.match(line)) is not None and m["kind"] == kind for line in self.markers)

    @property
    def slow(self) -> bool:
        return self.marked("slow")

    @property
    def no_run(self) -> bool:
        return self.marked("no-run")

    @property
    def is_api_example(self) -> bool:
        return API_EXAMPLE_MARKER in self.markers


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start = i
        markers: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].startswith("<!--") and lines[j].endswith("-->"):
            markers.insert(0, lines[j])
            j -= 1
        i += 1
        while i < len(lines) and lines[i] != "```":
            i += 1
        assert i < len(lines), f"{path.name}:{start + 1}: unclosed fence"
        found.append(
            Block(path, start + 1, match["lang"], "\n".join(lines[start + 1 : i]) + "\n", tuple(markers))
        )
        i += 1
    return found


ALL_BLOCKS = [block for path in doc_files() for block in blocks(path)]
PYTHON = [b for b in ALL_BLOCKS if b.lang == "python" and not b.no_run]
SPECS = [b for b in ALL_BLOCKS if b.lang == "yaml" and not b.no_run]


def _nav_files(nav: list) -> list[str]:
    files: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        files.extend(_nav_files(value) if isinstance(value, list) else [value])
    return files


def _nav() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return _nav_files(config["nav"])


def _run_python(code: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    script = cwd / "doc_example.py"
    script.write_text(code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.setdefault("GLOG_v", "3")
    try:
        return subprocess.run(
            [sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        script.unlink()


def _hooks():
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make docs installs it)")
    spec = importlib.util.spec_from_file_location("ampsweep_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the README ------------------------------------------------------------------------------------


def test_the_readme_is_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_links_only_to_docs_pages_that_exist() -> None:
    targets = [m["target"] for m in LINK.finditer(README.read_text(encoding="utf-8"))]
    assert targets, "README.md links into the docs"
    nav = set(_nav())
    for target in targets:
        path = target.split("#", 1)[0]
        assert path.startswith("docs/"), f"README links to {target}: only docs pages belong there"
        assert (ROOT / path).is_file(), f"README links to {target}, which does not exist"
        if path.endswith(".md"):
            assert path.removeprefix("docs/") in nav, f"README links to {target}, which is not in the nav"
    linked = {t.split("#", 1)[0].removeprefix("docs/") for t in targets}
    missing = sorted(set(REQUIRED_PAGES) - linked)
    assert not missing, f"README does not link to {missing}"


def test_the_readme_keeps_its_facts() -> None:
    text = README.read_text(encoding="utf-8")
    for fact in (
        "make demo",
        "make test",
        "`make test` is the test command",
        "MindSpore 2.7 to 2.10",
        "Python 3.10 or 3.11",
        ".ci/run",
    ):
        assert fact in text, f"README no longer says {fact!r}"


DEMO_TRIALS = re.compile(r"(?P<count>[\d,]+) trials (?:of|in) `examples/seed_repro\.yaml`")


def test_the_demos_trial_count_is_the_demos_own() -> None:
    """A count of the demo's trials comes from its spec; its times from bench_limit's run, never typed."""
    from ampsweep import Sweep

    trials = len(Sweep.from_yaml(ROOT / "examples" / "seed_repro.yaml").plan())
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        (p.name, int(m["count"].replace(",", ""))) for p in pages for m in DEMO_TRIALS.finditer(p.read_text())
    ]
    assert found, "the README names the demo's trial count"
    assert all(count == trials for _, count in found), f"the demo has {trials} trials: {found}"
    assert not re.search(r"make demo[^.]*\babout [\d.]+ minutes", README.read_text())


def test_the_report_picture_is_a_small_png() -> None:
    data = PICTURE.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) < 200 * 1024, f"{PICTURE.name} is {len(data) // 1024} KiB; keep it under 200 KiB"
    assert "docs/img/report.png" in README.read_text(encoding="utf-8")


# --- the site --------------------------------------------------------------------------------------


def test_every_required_page_is_in_the_nav_and_every_page_exists() -> None:
    nav = _nav()
    assert nav[0] == "index.md"
    missing = {page: what for page, what in REQUIRED_PAGES.items() if page not in nav}
    assert not missing, f"mkdocs.yml's nav lacks {missing}"
    for page in nav:
        assert (DOCS / page).is_file(), f"nav names {page}, which docs/ lacks"
    orphans = sorted(p.name for p in DOCS.glob("*.md") if p.name not in nav)
    assert not orphans, f"pages not in the nav: {orphans}"


def test_the_api_reference_is_generated_from_the_docstrings() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    for name in (
        "ampsweep.sweep.Sweep",
        "ampsweep.sweep.RunConfig",
        "ampsweep.jobs.Workload",
        "ampsweep.analysis.analyze",
    ):
        assert f"::: {name}\n" in text, f"api.md does not document {name}"


def test_every_fence_names_its_language_and_opt_outs_say_why() -> None:
    for block in ALL_BLOCKS:
        assert block.lang, f"{block.id}: a fence without a language (python, yaml, sh, text)"
        for line in block.markers:
            if "slow" in line or "no-run" in line:
                assert MARKER.match(line), (
                    f"{block.id}: write the marker as <!-- slow: why --> or <!-- no-run: why -->"
                )
    opted_out = [b.id for b in ALL_BLOCKS if b.no_run]
    assert len(opted_out) <= 2, f"too many examples opted out of running: {opted_out}"
    (example,) = [b for b in PYTHON if b.is_api_example]
    assert example.path == README and example.slow, "the README's Python API example runs a sweep: slow"


# --- generated content -----------------------------------------------------------------------------


def test_the_schema_tables_are_generated_from_the_contracts() -> None:
    hooks = _hooks()
    from ampsweep.contracts import TABLE_SCHEMAS, TRIALS_SCHEMA

    output = (DOCS / "output.md").read_text(encoding="utf-8")
    for table, schema in TABLE_SCHEMAS.items():
        assert f"<!-- schema: {table} -->" in output, f"output.md does not show the {table} table"
        rendered = hooks.schema_table(table, "output.md")
        rows = [line for line in rendered.splitlines() if line.startswith("| `")]
        assert len(rows) == len(schema)
        for row, field in zip(rows, schema):
            name, kind, meaning = (cell.strip() for cell in row.strip("|").split("|"))
            assert (name, kind) == (f"`{field.name}`", f"`{field.type}`")
            assert meaning, f"{table}.{field.name} has no meaning in the contracts"
    assert "`trial_id` | `string`" in hooks.schema_table("trials")
    assert len(TRIALS_SCHEMA) == sum(
        1 for line in hooks.schema_table("trials").splitlines() if line.startswith("| `")
    )
    # restated by hand, a table goes stale: no page spells a column row itself
    for path in doc_files():
        assert "| `trial_id` |" not in path.read_text(encoding="utf-8"), (
            f"{path.name} restates a schema table"
        )


def test_the_home_page_is_the_readme_with_site_links() -> None:
    hooks = _hooks()
    assert "<!-- include: README.md -->" in (DOCS / "index.md").read_text(encoding="utf-8")
    text = hooks.include("README.md", "index.md")
    assert "](docs/" not in text and "](install.md)" in text
    assert not text.startswith("# "), "the included README's title is dropped (the page has its own)"


def test_the_cli_page_names_every_option() -> None:
    from ampsweep.sweep.cli import main

    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    for command in ("plan", "run", "pull", "status", "report"):
        assert f"## {command}" in page, f"cli.md has no section for `ampsweep {command}`"
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            main([command, "--help"])
        options = set(re.findall(r"(--[a-z][a-z-]+)", out.getvalue())) - {"--help"}
        missing = sorted(option for option in options if option not in page)
        assert not missing, f"cli.md does not describe `ampsweep {command}` {missing}"


# --- examples --------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", SPECS, ids=lambda b: b.id)
def test_the_spec_examples_validate(block: Block) -> None:
    from ampsweep.sweep import parse_spec

    parse_spec(yaml.safe_load(block.code))


@pytest.mark.parametrize("block", [b for b in PYTHON if not b.slow], ids=lambda b: b.id)
def test_the_python_examples_run(block: Block, tmp_path: Path) -> None:
    ran = _run_python(block.code, tmp_path, timeout=120)
    assert ran.returncode == 0, f"{block.id} failed:\n{ran.stderr[-3000:]}"


@pytest.fixture(scope="module")
def api_demo_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Where the README's Python example ran: ``runs/api-demo`` holds its sweep."""
    (example,) = [b for b in PYTHON if b.is_api_example]
    cwd = tmp_path_factory.mktemp("docs-examples")
    return cwd, _run_python(example.code, cwd, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in PYTHON if b.slow], ids=lambda b: b.id)
def test_the_slow_python_examples_run(block: Block, api_demo_dir) -> None:
    cwd, example = api_demo_dir
    assert example.returncode == 0, f"the README's Python example failed:\n{example.stderr[-3000:]}"
    if block.is_api_example:
        assert "trials," in example.stdout and (cwd / "runs" / "api-demo" / "report" / "report.md").is_file()
        return
    ran = _run_python(block.code, cwd, timeout=300)
    assert ran.returncode == 0, f"{block.id} failed:\n{ran.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("block", SPECS, ids=lambda b: b.id)
def test_the_spec_examples_plan(block: Block, tmp_path: Path) -> None:
    """``ampsweep plan``: the whole validation, black-list names checked against the built workload."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(block.code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-m", "ampsweep", "plan", str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, f"{block.id}: ampsweep plan failed:\n{ran.stderr[-3000:]}"
    assert ran.stdout.strip()


def _table_names(page: str, section: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", text, re.M)


def test_the_spec_page_lists_every_field_and_axis() -> None:
    from ampsweep.sweep import Grid, SweepSpec

    for section, model in (("Top level", SweepSpec), ("The grid", Grid)):
        documented = _table_names("spec.md", section)
        assert sorted(documented) == sorted(model.model_fields), (
            f"spec.md's {section!r} table: {sorted(set(model.model_fields) - set(documented))} missing, "
            f"{sorted(set(documented) - set(model.model_fields))} not in {model.__name__}"
        )


def test_the_benchmarks_page_names_every_benchmark() -> None:
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert "<!-- include: benchmarks/RESULTS.md -->" in page
    missing = [
        p.stem for p in sorted((ROOT / "benchmarks").glob("bench_*.py")) if f"| `{p.stem}` |" not in page
    ]
    assert not missing, f"benchmarks.md does not say what {missing} measure"
