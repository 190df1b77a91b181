"""report.html: one self-contained page, hostile names escaped, opened in headless Chromium.

The Chromium test is the one place where "self-contained" and "no console
errors" are checked by a real browser: the page carries a
Content-Security-Policy that forbids every network fetch, and Chromium logs a
blocked fetch (or any script error) as a console message, which the test
reads from stderr. A second look, in a 1280 x 800 window, checks that the page
never scrolls sideways. Both are skipped only when no Chromium binary exists.
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ampsweep import analysis
from tests.test_analysis import CURVE, STEPS, write_trial

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>alert('x')</script>"
#: where a real MindSpore error points: one unbroken word far wider than a laptop screen
LONG_PATH = (
    "/home/jenkins/agent-working-dir/workspace/executor0/mindspore/mindspore/ccsrc/plugin/device/"
    "ascend/kernel/aicore/aicore_kernel_build.cc:512:CompileKernelMod_Fused_Cast_LayerNorm_fusion_"
    "12345678901234567890_kernel0.json"
)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
)
#: loss curves, gradient norm, divergence map, per-layer maxima, the failure
EXPECTED_PLOTS = 5


def chromium() -> str | None:
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build_hostile_sweep(root: Path) -> None:
    """A small sweep whose every user-supplied name tries to inject markup."""
    every_tenth = np.where(np.arange(STEPS) % 10 == 0, 2.0, 0.5)
    diverging = np.where(np.arange(STEPS) < 40, CURVE, np.nan)[:50]
    common = {"sweep": f"demo {EVIL}", "workload": f"wl{EVIL}:make"}
    for seed in range(2):
        write_trial(root, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed, step_ms=20.0, **common)
        write_trial(
            root,
            f"best-{seed}",
            loss=CURVE,
            black_list=[EVIL],
            clip=1.0,
            seed=seed,
            grad_norm=every_tenth,
            **common,
        )
        write_trial(root, f"div-{seed}", loss=diverging, clip=1.0, seed=seed, **common)
        write_trial(
            root,
            f"fail-{seed}",
            black_list=["Other"],
            seed=seed,
            outcome="failed",
            error=f"RuntimeError: bad layer {EVIL} at {LONG_PATH}",
            **common,
        )
    part = root / "layers" / "trial_id=div-0"
    part.mkdir(parents=True)
    steps = np.repeat(np.arange(0, 50, 5), 2)
    absmax = np.where(steps >= 40, np.inf, 0.1 * (1 + steps))
    pq.write_table(
        pa.table(
            {
                "step": steps.astype(np.int64),
                "layer": [f"fc{EVIL}.weight", "head.$bias$"] * (len(steps) // 2),
                "grad_norm": absmax,
                "grad_absmax": absmax,
                "nonfinite": (~np.isfinite(absmax)).astype(np.int64),
            }
        ),
        part / "part-0.parquet",
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html") / "sweep"
    build_hostile_sweep(root)
    analysis.write_report(root)
    return root / "report" / "report.html"


def test_html_is_self_contained_and_escaped(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    assert text.count("<script") == 0, "a user-supplied name became markup"
    assert html.escape(EVIL) in text  # the names are shown, escaped
    assert f"demo {html.escape(EVIL)}" in text and "RuntimeError: bad layer" in text
    # nothing to fetch: no external URL in any src/href, figures are data URIs
    assert not re.search(r"""(src|href)\s*=\s*["']?(?!data:)[a-z]+:""", text)
    assert text.count('<img class="plot"') == EXPECTED_PLOTS
    assert text.count('src="data:image/png;base64,') == EXPECTED_PLOTS
    assert "default-src 'none'" in text
    for name in (
        "Loss curves",
        "Gradient norm",
        "Divergence map",
        "Per-layer gradient maxima",
        "The failure",
    ):
        assert f'alt="{name}"' in text


def run_chromium(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Open ``page`` in a fresh headless Chromium profile (skips the test when there is no Chromium)."""
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium binary (install `chromium`; `make test` in CI does)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "HOME": str(tmp_path)},
    )


def test_html_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return run_chromium(report, tmp_path, *extra)

    dom = run("--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert not console, "console messages (script error or blocked fetch):\n" + "\n".join(console)
    page = dom.stdout
    assert "<script" not in page.lower()
    assert page.count('<img class="plot"') == EXPECTED_PLOTS
    table = re.search(r'<table class="ranking">(.*?)</table>', page, re.S)
    assert table is not None
    ranking = analysis.analyze(report.parent.parent).ranking
    assert table.group(1).count("<tr") == len(ranking) + 1  # header row + one per configuration
    assert "(recommended)" in table.group(1)

    shot = tmp_path / "report.png"
    pic = run(f"--screenshot={shot}", "--window-size=1400,3000")
    assert pic.returncode == 0, pic.stderr[-3000:]
    assert shot.is_file() and shot.stat().st_size > 50_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


#: appended to a copy of the page: once it has loaded (figures included), measure the
#: layout and leave the numbers on <html>, where ``--dump-dom`` shows them
MEASURE = """<script>
addEventListener("load", () => {
  const root = document.documentElement, width = root.clientWidth;
  const sticksOut = (e) => e.getBoundingClientRect().right > width + 0.5;
  const culprits = [...document.body.querySelectorAll("*")]
    .filter((e) => sticksOut(e) && !sticksOut(e.parentElement))
    .map((e) => `<${e.tagName.toLowerCase()} class="${e.className}"> ends at ${Math.round(e.getBoundingClientRect().right)} px`);
  scrollTo(100000, 0);
  root.dataset.layout = JSON.stringify({
    innerWidth: innerWidth, clientWidth: width, scrollWidth: root.scrollWidth, scrollX: scrollX, culprits: culprits,
  });
});
</script>"""


def test_html_fits_a_1280_px_window(report: Path, tmp_path: Path) -> None:
    """On a 1280 x 800 laptop window the page never scrolls sideways: a long error path
    wraps, and a wide table or code block scrolls inside its own box."""
    text = report.read_text(encoding="utf-8")
    assert LONG_PATH in text  # the page does carry a word far wider than the window
    # the page itself runs no script; its copy may run the measuring one, and nothing else
    copy = tmp_path / "measured.html"
    allowed = text.replace("default-src 'none'", "default-src 'none'; script-src 'unsafe-inline'", 1)
    copy.write_text(allowed.replace("</body>", MEASURE + "\n</body>", 1), encoding="utf-8")

    dom = run_chromium(copy, tmp_path, "--window-size=1280,800", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    found = re.search(r'<html[^>]* data-layout="([^"]*)"', dom.stdout)
    assert found is not None, "the measuring script did not run:\n" + dom.stderr[-3000:]
    layout = json.loads(html.unescape(found.group(1)))
    assert layout["innerWidth"] == 1280, layout  # the window really is 1280 px wide
    assert layout["scrollWidth"] <= layout["clientWidth"], (
        f"the page is {layout['scrollWidth']} px wide in a {layout['clientWidth']} px window:\n"
        + "\n".join(layout["culprits"])
    )
    assert layout["scrollX"] == 0, layout  # scrolling right goes nowhere


#: the renderers and what they draw with: formatting only, so no reader may be imported
RENDERERS = ("_html", "_figures", "_markdown", "_plot", "_terminal", "_csv", "_recommendation")
#: the modules that read a sweep folder (and ``_analyze``, which runs them)
READERS = {"_load", "_steps", "_figure_data", "_anomalies", "_side_files", "_analyze", "_public", "_writer"}
#: the concept folders of ``analysis/``: importing one of them names the module imported from it
FOLDERS = {"compute", "wording", "render"}


def _path(module: str) -> Path:
    """``analysis/**/<module>.py`` (module names are unique across the concept folders)."""
    (path,) = (ROOT / "analysis").rglob(f"{module}.py")
    return path


def _imports(module: str) -> tuple[set[str], set[str]]:
    """What ``analysis/**/<module>.py`` imports (in-function imports too): package modules, others."""
    local: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(ast.parse(_path(module).read_text())):
        if isinstance(node, ast.Import):
            other |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[:2] == ["ampsweep", "analysis"]
        ):
            last = (node.module or "").split(".")[-1]
            if not last or last in FOLDERS or last == "analysis":  # ``from ..compute import _classes``
                local |= {alias.name for alias in node.names}
            else:
                local.add(last)
        elif isinstance(node, ast.ImportFrom) and node.module:
            other.add(node.module)
    return local, other


@pytest.mark.parametrize("module", RENDERERS)
def test_renderers_import_no_reader(module: str) -> None:
    local, other = _imports(module)
    assert not local & READERS, f"analysis/{module}.py imports a reader: {sorted(local & READERS)}"
    assert not [name for name in other if name.split(".")[0] == "pyarrow"], f"{module} imports pyarrow"


def test_the_import_reader_sees_through_folders() -> None:
    """``from ..compute._steps import SPIKE_WINDOW`` is an import of ``_steps``, ``from ..compute import
    _classes`` one of ``_classes``: the check above would pass vacuously if it read them as ``compute``."""
    assert {"_steps", "_anomalies"} <= _imports("_text")[0] | _imports("_localization")[0]
    assert "_classes" in _imports("_labels")[0]


def test_figures_reach_no_reader() -> None:
    """Drawing does not even import a reader indirectly."""
    todo, seen = ["_figures"], set()
    while todo:
        module = todo.pop()
        seen.add(module)
        todo += sorted(_imports(module)[0] - seen)
    assert "_plot" in seen and not seen & READERS, sorted(seen & READERS)


def _forbid_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any open of a Parquet file or a filesystem, or a figure-data read, fails the test."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from ampsweep.analysis.compute import _figure_data

    def no_read(*_: object, **__: object) -> None:
        raise AssertionError("the sweep folder was read")

    for owner, name in (
        (pq, "ParquetFile"),
        (pq, "read_table"),
        (pq, "read_metadata"),
        (ds, "dataset"),
        (pafs, "LocalFileSystem"),
        (_figure_data, "read_trial_tables"),
        (_figure_data, "files_by_trial"),
    ):
        monkeypatch.setattr(owner, name, no_read)


def test_report_renders_without_the_sweep_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read happens in analyze(): with steps/ and layers/ gone and every reader disabled,
    the page and its figures come out byte for byte the same."""
    root = tmp_path / "sweep"
    build_hostile_sweep(root)
    result = analysis.analyze(root)
    assert isinstance(result, analysis.Analysis) and isinstance(result, analysis.SweepAnalysis)
    figures = result.kinds[0].figures
    assert (
        figures is not None and figures.loss and figures.grad_norm and figures.layers and figures.divergence
    )
    page = analysis.render_html(result)
    markdown = analysis.render_markdown(result)
    assert page.count('<img class="plot"') == EXPECTED_PLOTS

    shutil.rmtree(root / "steps")
    shutil.rmtree(root / "layers")
    with monkeypatch.context() as patch:
        _forbid_reads(patch)
        again = analysis.render_html(result)
        assert analysis.render_markdown(result) == markdown
        assert analysis.recommendation_json(result) and analysis.ranking_csv(result.ranking)
    assert again.count('<img class="plot"') == EXPECTED_PLOTS
    assert again == page

    out = result.report(tmp_path / "out")
    assert out == tmp_path / "out" / "report.md"
    assert (out.parent / "report.html").read_text(encoding="utf-8") == page
    names = {p.name for p in out.parent.iterdir()}
    assert names == {"report.md", "report.html", "recommendation.json", "ranking.csv", "failure.png"}
    assert "](failure.png)" in (out.parent / "report.md").read_text(encoding="utf-8")


def test_analyze_without_figures_reads_no_step_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ampsweep.analysis.compute import _figure_data

    root = tmp_path / "sweep"
    build_hostile_sweep(root)
    monkeypatch.setattr(_figure_data, "read_trial_tables", lambda *_a, **_k: pytest.fail("figures were read"))
    result = analysis.analyze(root, figures=False)
    assert result.kinds and all(kind.figures is None for kind in result.kinds)
    page = analysis.render_html(result)
    assert '<img class="plot"' not in page and "ampsweep report" in page
    assert result.terminal(top=2).row_count == 2
