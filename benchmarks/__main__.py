"""``python -m benchmarks [NAME ...]``: run the ``bench_*`` modules and write RESULTS.md.

Every module runs in its own child process: MindSpore's thread settings and a
Ray session are process-wide, and a benchmark must not inherit another's. A
run of some modules only replaces their sections of RESULTS.md and keeps the
rest, so one benchmark can be redone without paying for all of them; each
section carries its own date and load average, because on a shared machine
those differ from section to section. Before each section the runner waits
(a minute at most) for the CPUs to go quiet, so one benchmark does not time
the previous one's shutdown.
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from ._common import child_env
from ._machine import load_average, machine_markdown, now_utc, wait_for_quiet

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
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
