"""``python -m benchmarks [NAME ...]``: run the ``bench_*`` modules and write RESULTS.md.

Every module runs in its own child process: MindSpore's thread settings and a
Ray session are process-wide, and a benchmark must not inherit another's. A
run of some modules only replaces their sections of RESULTS.md and keeps the
rest, so one benchmark can be redone without paying for all of them; each
section carries its own date and load average, because on a shared machine
those differ from section to section. Before each section the runner waits
(a minute at most) for the CPUs to go quiet, so one benchmark does not time
the previous one's shutdown.

Each benchmark's figures also go to ``benchmarks/results/<name>.json``, for a
later run to compare against without reading Markdown. A module that writes
that file itself during its run (``bench_late``, ``bench_watch``,
``bench_limit``, ``bench_launcher``, ``bench_startup``, ``bench_faults``: richer
figures than its tables) keeps it; for any other the runner writes the section's tables, parsed from its
Markdown. Only full-size runs write it: the tiny smoke-test figures mean nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from ._common import child_env
from ._machine import load_average, machine_markdown, now_utc, wait_for_quiet

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
RESULTS_DIR = HERE / "results"
_START = "<!-- bench:{name}:start -->"
_END = "<!-- bench:{name}:end -->"
_SECTION = re.compile(
    r"<!-- bench:(?P<name>[\w.]+):start -->\n(?P<body>.*?)\n<!-- bench:(?P=name):end -->", re.S
)


def discover() -> list[str]:
    """Every ``bench_*.py`` next to this file, in name order (stable section order)."""
    return sorted(path.stem for path in HERE.glob("bench_*.py"))


def _normalise(name: str, known: list[str]) -> str:
    stem = Path(name).stem
    for candidate in (stem, f"bench_{stem}"):
        if candidate in known:
            return candidate
    raise SystemExit(f"benchmarks: unknown benchmark {name!r}; known: {', '.join(known) or 'none'}")


def _run_child(name: str, out_file: Path, tiny: bool = False) -> None:
    """Child-process body: import one module, run it, write its section to ``out_file``.

    ``tiny`` runs the module's smoke-test size (``run(tiny=True)``), which the
    test suite uses so a benchmark cannot rot; those figures mean nothing.
    """
    module = importlib.import_module(f"benchmarks.{name}")
    section = module.run(tiny=True) if tiny else module.run()
    if not isinstance(section, str) or not section.strip():
        raise TypeError(f"benchmarks.{name}.run() must return a non-empty Markdown string")
    out_file.write_text(section.strip() + "\n")


def run_isolated(name: str) -> tuple[str, float, bool]:
    """Run one benchmark in a fresh interpreter; a failure becomes a section that says so."""
    waited, busy = wait_for_quiet()
    settled = (
        f"CPUs {busy:.0%} busy after waiting {waited:.0f} s for them to settle" if busy is not None else ""
    )
    started = time.perf_counter()
    load = load_average()
    when = now_utc()
    own_json = RESULTS_DIR / f"{name}.json"
    own_before = _mtime_ns(own_json)  # changed after the child: the module wrote its own figures
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-") as tmp:
        out_file = Path(tmp) / "section.md"
        command = [sys.executable, "-m", "benchmarks", "--child", name, str(out_file)]
        tail: deque[str] = deque(maxlen=15)
        print(f"== {name}", file=sys.stderr, flush=True)
        # child_env puts this checkout first on PYTHONPATH, so Ray's worker processes import it too
        with subprocess.Popen(
            command, cwd=HERE.parent, env=child_env(), stderr=subprocess.PIPE, text=True
        ) as child:
            assert child.stderr is not None
            for line in child.stderr:  # echo progress live, keep the end for the report
                sys.stderr.write(line)
                tail.append(line.rstrip())
        elapsed = time.perf_counter() - started
        ok = child.returncode == 0 and out_file.is_file()
        if ok:
            body = out_file.read_text().strip()
            if _mtime_ns(own_json) == own_before:
                RESULTS_DIR.mkdir(parents=True, exist_ok=True)
                figures = section_figures(name, body, when, load)
                own_json.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
        else:
            shown = "\n".join(tail)
            body = (
                f"## {name}\n\n**Failed** with exit code {child.returncode}; "
                f"the last lines it printed:\n\n```\n{shown}\n```"
            )
    stamp = f"_Measured {when}, took {elapsed:.0f} s; 1-minute load average at start {load}"
    stamp += f" ({settled})._" if settled else "._"
    lines = body.splitlines()
    if lines and lines[0].startswith("#"):
        body = "\n".join([lines[0], "", stamp, *lines[1:]])
    else:
        body = f"{stamp}\n\n{body}"
    return body, elapsed, ok


_HEADING = re.compile(r"^#{2,3}\s+(?P<text>.+?)(?:\s+#+)?\s*$")
_RULE = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_NUMBER = re.compile(r"^[+-]?(\d+|\d{1,3}(,\d{3})+)(\.\d+)?([eE][+-]?\d+)?$")


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells: split on unescaped ``|`` (as GitHub does, code spans included)."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


def _value(cell: str) -> Any:
    """A plain number as int or float (``36,634`` too); any other cell as its raw string."""
    if not _NUMBER.match(cell):
        return cell
    plain = cell.replace(",", "")
    return int(plain) if re.fullmatch(r"[+-]?\d+", plain) else float(plain)


def markdown_tables(markdown: str) -> list[dict[str, Any]]:
    """Every table in a section: its nearest ``##``/``###`` heading above, column names, rows.

    A table is a header line, a ``|---|`` rule, then rows starting with ``|``.
    Cells that are plain numbers become numbers; the rest (bold, units, lists)
    stay strings, so nothing is guessed. Fenced code (a failed benchmark's
    output, say) is neither heading nor table.
    """
    tables: list[dict[str, Any]] = []
    heading: str | None = None
    lines = markdown.splitlines()
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        match = _HEADING.match(line)
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            pass
        elif match:
            heading = match["text"]
        elif line.startswith("|") and i + 1 < len(lines) and _RULE.match(lines[i + 1].strip()):
            columns = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append([_value(cell) for cell in _cells(lines[i])])
                i += 1
            tables.append({"heading": heading, "columns": columns, "rows": rows})
            continue
        i += 1
    return tables


def section_figures(name: str, body: str, measured_at: str, load: str) -> dict[str, Any]:
    """What ``results/<name>.json`` holds for a benchmark that writes none itself."""
    return {"name": name, "measured_at": measured_at, "load_average": load, "tables": markdown_tables(body)}


def _mtime_ns(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def _existing_sections() -> dict[str, str]:
    if not RESULTS.is_file():
        return {}
    return {m["name"]: m["body"] for m in _SECTION.finditer(RESULTS.read_text())}


def write_results(sections: dict[str, str], order: list[str]) -> None:
    """Header (machine, date) then each section between markers, so a rerun can replace it."""
    parts = [
        "# ampsweep benchmarks",
        "",
        "Written by `make bench` (`python -m benchmarks`); `python -m benchmarks bench_capture` "
        "reruns one section and keeps the others. Each `benchmarks/bench_*.py` module's `run()` "
        "returns its section.",
        "",
        machine_markdown(),
        "",
    ]
    names = [n for n in order if n in sections] + sorted(n for n in sections if n not in order)
    for name in names:
        parts += [_START.format(name=name), sections[name].strip(), _END.format(name=name), ""]
    tmp = RESULTS.with_suffix(".md.tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(RESULTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all), e.g. bench_capture")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # with --child: smoke size
    args = parser.parse_args(argv)
    if args.child:
        _run_child(args.child[0], Path(args.child[1]), tiny=args.tiny)
        return 0
    known = discover()
    if args.list:
        print("\n".join(known))
        return 0
    selected = [_normalise(n, known) for n in args.names] or known
    sections = _existing_sections()
    sections = {name: body for name, body in sections.items() if name in known}
    failed = []
    for name in selected:
        body, elapsed, ok = run_isolated(name)
        sections[name] = body
        if not ok:
            failed.append(name)
        write_results(sections, known)  # after each one: a later crash keeps what was measured
        print(f"== {name}: {elapsed:.0f} s", file=sys.stderr, flush=True)
    print(f"wrote {RESULTS}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
