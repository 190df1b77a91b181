"""Write the report folder (docs/ranking.md, "What `report/` holds"): the last link of the chain.

Every file is written to a temporary name and renamed into place (:func:`atomic_write`), as everything in
a sweep folder is, so a reader never sees half a report; on a full or over-quota disk the ``OSError`` names
the report file, so the CLI can say which one and how to write it again.
"""

from __future__ import annotations

import base64
import errno
import os
import tempfile
from pathlib import Path

import yaml

from ._analyze import analyze
from ._model import NEXT_SPEC_FILE, SweepAnalysis
from .compute._load import resolve
from .compute._side_files import read_spec_file
from .render._csv import ranking_csv
from .render._figures import report_figures
from .render._html import render_html
from .render._markdown import render_markdown
from .render._plot import FigureImage
from .render._recommendation import recommendation_json
from .wording._next_sweep import next_spec
from .wording._text import failure_file

#: ``errno`` values of a filesystem that takes no more bytes: full, or over the user's quota
_NO_SPACE = frozenset(code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if code is not None)


def atomic_write(path: Path, data: str | bytes) -> None:
    """``data`` (text as UTF-8) into ``path``: written to a temporary name beside it, then renamed into place."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a shared report from its readers
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        code = exc.errno if isinstance(exc, OSError) else None
        if code is not None and code in _NO_SPACE:
            # the error of a write() or close() names no file: name the report file it was for
            raise OSError(code, os.strerror(code), str(path)) from exc
        raise


def write_report(
    sweep_dir: str | Path,
    out_dir: str | Path | None = None,
    analysis: SweepAnalysis | None = None,
    images: list[list[FigureImage]] | None = None,
    *,
    spec_dir: str | Path | None = None,
) -> Path:
    """Write ``ranking.csv``, ``report.md``, ``report.html`` and ``recommendation.json``; return the path of
    ``report.md``.

    ``out_dir`` defaults to ``<sweep_dir>/report``; pass one when the sweep folder is a URI or read-only.
    ``analysis`` reuses an ``analyze`` result already in hand instead of reading the sweep again;
    ``images``, that analysis's figures drawn already (:func:`analysis.render._figures.report_figures`):
    report.html embeds each and ``failure.png`` is the same image. ``spec_dir``, the folder of the spec the
    sweep was run from (known to ``ampsweep run``): a workload file named relative to it is written into
    ``next-spec.yaml`` as an absolute path, so the next spec runs from anywhere.
    """
    if out_dir is None and "://" in str(sweep_dir):
        raise ValueError(f"{sweep_dir} is a URI: pass out_dir, a local folder for the report")
    if analysis is None:
        analysis = analyze(sweep_dir)
    target = Path(out_dir) if out_dir is not None else Path(resolve(sweep_dir).root) / "report"
    atomic_write(target / "ranking.csv", ranking_csv(analysis.ranking))
    atomic_write(target / "recommendation.json", recommendation_json(analysis))
    if images is None:
        images = report_figures(analysis)
    atomic_write(target / "report.html", render_html(analysis, images=images))
    for index, drawn in enumerate(images):
        image = next((i for i in drawn if i.key.startswith("failure-")), None)
        if image is not None:  # report.md shows it as a file beside itself
            atomic_write(target / failure_file(index), base64.b64decode(image.png_base64))
    following = next(
        (k.recommendation.next_sweep for k in analysis.kinds if k.recommendation.next_sweep), None
    )
    spec = read_spec_file(sweep_dir) if following is not None and following.has_spec else None
    if following is not None and spec is not None:
        text = yaml.safe_dump(next_spec(spec, following, spec_dir), sort_keys=False)
        atomic_write(target / NEXT_SPEC_FILE, f"# {following.change}\n# why: {following.why}\n{text}")
    else:  # an earlier report's next spec no longer follows from this analysis
        (target / NEXT_SPEC_FILE).unlink(missing_ok=True)
    report = target / "report.md"
    atomic_write(report, render_markdown(analysis))
    return report
