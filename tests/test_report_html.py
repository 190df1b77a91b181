"""report.html: one self-contained page, hostile names escaped, opened in headless Chromium.

The Chromium test is the one place where "self-contained" and "no console
errors" are checked by a real browser: the page carries a
Content-Security-Policy that forbids every network fetch, and Chromium logs a
blocked fetch (or any script error) as a console message, which the test
reads from stderr. It is skipped only when no Chromium binary exists.
"""

from __future__ import annotations

import html
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

EVIL = "<script>alert('x')</script>"
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
#: loss curves, gradient norm, divergence map, per-layer maxima
EXPECTED_PLOTS = 4


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
            error=f"RuntimeError: bad layer {EVIL}",
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
    for name in ("Loss curves", "Gradient norm", "Divergence map", "Per-layer gradient maxima"):
        assert f'alt="{name}"' in text


def test_html_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium binary (install `chromium`; `make test` in CI does)")
    url = report.resolve().as_uri()
    env = {**os.environ, "HOME": str(tmp_path)}

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        profile = tmp_path / f"profile-{len(extra)}-{extra[0][2:8]}"
        return subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )

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
