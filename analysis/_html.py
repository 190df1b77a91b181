"""``report/report.html``: the report as one self-contained page.

Why one file: a report is mailed, attached to tickets and opened from object
storage, where sibling image files get lost. Figures are PNG data URIs, the
style sheet is inline, and there is no script at all. A Content-Security-Policy
meta tag (``default-src 'none'``) makes the browser refuse any network fetch,
so a stray external reference would show up as a console error in the test
instead of silently leaking a request.

Everything that comes from the sweep (its name, workload, layer and
black-list names, error messages) goes through :func:`html.escape`; text in
backticks is shown as code after escaping, so it cannot inject markup either.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

import pandas as pd

from ._evidence import STATUS_NO_TRIALS, STATUS_RECOMMENDED
from ._figures import FigureImage, kind_figures
from ._text import counts_items, ranking_cells, rules_notes, rules_text

if TYPE_CHECKING:
    from ._report import KindAnalysis, SweepAnalysis

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1300px;
       padding: 0 1.5em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
code, pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #f6f8fa; border: 1px solid #e1e4e8; border-radius: 6px; padding: .8em 1em; overflow-x: auto; }
p.verdict { font-size: 1.15em; padding: .6em .9em; border-left: 4px solid #2da44e; background: #f0fff4; }
p.verdict.none { border-color: #cf222e; background: #fff5f5; }
table.ranking { border-collapse: collapse; font-size: 12.5px; width: 100%; }
table.ranking th, table.ranking td { border: 1px solid #d0d7de; padding: 3px 6px; vertical-align: top; }
table.ranking th { background: #f6f8fa; position: sticky; top: 0; }
table.ranking tr.recommended td { background: #e6ffec; }
table.ranking tr.baseline td { background: #f6f8fa; }
table.ranking td.rule { font-size: 11.5px; color: #444; min-width: 28em; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 12.5px; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _inline(text: object) -> str:
    """Escape, then show `backticked` spans as code (the escaped text only)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(text))


def _list(items: list[str]) -> str:
    if not items:
        return ""
    return "<ul>\n" + "\n".join(f"<li>{_inline(i)}</li>" for i in items) + "\n</ul>\n"


def _code(code: dict[str, str] | None) -> str:
    if not code:
        return ""
    return (
        "<h3>Code</h3>\n"
        "<h4>A hand-written training step</h4>\n"
        f'<pre><code class="language-python">{_esc(code["train_step"])}</code></pre>\n'
        "<h4>With <code>mindspore.train.Model</code></h4>\n"
        f'<pre><code class="language-python">{_esc(code["model"])}</code></pre>\n'
    )


def _recommendation(kind: KindAnalysis, suffix: str) -> str:
    rec = kind.recommendation
    out = [f"<h2>Recommendation{suffix}</h2>"]
    if rec["status"] == STATUS_NO_TRIALS:
        return "\n".join(out) + f'\n<p class="verdict none">{_inline(rec["text"])}</p>\n'
    if rec["status"] == STATUS_RECOMMENDED:
        out.append(f'<p class="verdict">{_inline(rec["text"])}</p>')
        out.append("<h3>Evidence</h3>")
        out.append(_list(rec["evidence"]["statements"]))
        if rec["undecided"]:
            out.append("<h3>What this sweep could not decide</h3>")
            out.append(_list(rec["undecided"]))
        out.append(_code(rec["code"]))
        out.append(f"<p>Why it ranks first: {_inline(rec['rule'])}.</p>")
        return "\n".join(out)
    out.append(
        '<p class="verdict none"><strong>No mixed-precision configuration was stable on every seed and as '
        f"good as FP32.</strong> {_inline(rec['text'].split('. ', 1)[1])}</p>"
    )
    out.append(_list(rec["evidence"]["statements"]))
    out.append(_code(rec["code"]))
    out.append("<h3>What to try next</h3>")
    out.append(_list(rec["next_steps"]))
    if rec["undecided"]:
        out.append("<h3>What this sweep did not cover</h3>")
        out.append(_list(rec["undecided"]))
    return "\n".join(out)


def _ranking(ranking: pd.DataFrame, suffix: str) -> str:
    headers, rows = ranking_cells(ranking)
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = []
    for (_, r), cells in zip(ranking.iterrows(), rows):
        cls = "recommended" if r["recommended"] else ("baseline" if r["baseline"] else "")
        tds = "".join(
            f'<td class="rule">{_esc(c)}</td>' if i == len(cells) - 1 else f"<td>{_esc(c)}</td>"
            for i, c in enumerate(cells)
        )
        body.append(f'<tr class="{cls}">{tds}</tr>' if cls else f"<tr>{tds}</tr>")
    return (
        f"<h2>Ranking{suffix}</h2>\n"
        f'<table class="ranking">\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(body)
        + "\n</tbody>\n</table>\n"
    )


def _figures(images: list[FigureImage], suffix: str) -> str:
    if not images:
        return f"<h2>Figures{suffix}</h2>\n<p>No step data to draw.</p>\n"
    parts = [f"<h2>Figures{suffix}</h2>"]
    for image in images:
        parts.append(
            f'<figure id="{_esc(image.key)}">'
            f'<img class="plot" alt="{_esc(image.title)}" src="data:image/png;base64,{image.png_base64}">'
            f"<figcaption>{_esc(image.caption)}</figcaption></figure>"
        )
    return "\n".join(parts) + "\n"


def _failures(a: SweepAnalysis) -> str:
    from ._configs import first_line
    from ._rank import clip_text

    scores = a.scores
    failed = scores[scores["outcome"] == "failed"]
    diverged = scores[scores["outcome"] == "diverged"]
    items = [
        f"`{row.trial_id}` {row.amp_level} bl={row.black_list_key} clip={clip_text(row.clip)} seed {row.seed}: "
        f"{first_line(row.error) or 'no error message recorded'}"
        for row in failed.itertuples(index=False)
    ]
    out = ["<h2>Failures</h2>"]
    out.append(_list(items) if items else "<p>No trial failed with an exception.</p>")
    if len(diverged):
        rows = [
            f"`{row.trial_id}` {row.amp_level} bl={row.black_list_key} seed {row.seed}: first non-finite step "
            + ("-" if pd.isna(row.first_nonfinite) else str(int(row.first_nonfinite)))
            for row in diverged.head(50).itertuples(index=False)
        ]
        if len(diverged) > 50:
            rows.append(f"... and {len(diverged) - 50} more (see `trials/`)")
        out.append(f"<p>Diverged trials: {len(diverged)}</p>")
        out.append(_list(rows))
    return "\n".join(out)


def _rules() -> str:
    items = "\n".join(f"<li>{_inline(t)}</li>" for t in rules_text())
    notes = "\n".join(f"<p>{_inline(n)}</p>" for n in rules_notes())
    return f"<h2>How the ranking is decided</h2>\n<ol>\n{items}\n</ol>\n{notes}\n"


def render_html(a: SweepAnalysis, figures: bool = True) -> str:
    """The whole page. ``figures=False`` skips matplotlib (for quick text-only checks)."""
    title = f"ampsweep report: {a.name}"
    many = len(a.kinds) > 1
    body = [f"<h1>{_esc(title)}</h1>", "<h2>Trials</h2>", _list(counts_items(a))]
    if not a.kinds:
        body.append(
            '<h2>Recommendation</h2>\n<p class="verdict none">Nothing to recommend: no committed trial '
            "could be ranked.</p>"
        )
    for i, kind in enumerate(a.kinds):
        suffix = f" (device kind: {_esc(kind.device_kind or 'unknown')})" if many else ""
        images = kind_figures(a.sweep_dir, kind.ranking, a.scores, f"k{i}") if figures else []
        body.append(f'<section class="kind" id="kind-{i}">')
        body.append(_recommendation(kind, suffix))
        if not kind.ranking.empty:
            body.append(_ranking(kind.ranking, suffix))
        if figures:
            body.append(_figures(images, suffix))
        body.append("</section>")
    body.append(_failures(a))
    body.append(_rules())
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
