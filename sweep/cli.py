"""The ``ampsweep`` command (``docs/cli.md``): every user error is one line on stderr and exit code 2,
raised before anything is written; a Ray started beside the check is shut down."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampsweep import __version__

from ._api import Sweep, completed
from ._config import RunConfig, check_writer
from ._errors import OutOfSpace, SpecError, SweepStopped, is_out_of_space
from ._result import SweepResult
from ._tensorboard import check_logdir
from .cluster._launcher import cluster_address
from .cluster._pool import WorkerPool
from .cluster._ray_start import checked_while_actors_start
from .devices import DEVICE_KINDS
from .planning._grid import trials_to_train
from .planning._spec import read_spec
from .planning._workload_check import resolve_workload

if TYPE_CHECKING:
    from ampsweep.jobs import Profile

    from .store._pull import SweepSource

EXIT_USAGE = 2
#: what a shell reports for a process ended by SIGPIPE (128 + 13)
EXIT_BROKEN_PIPE = 141


def _positive_int(text: str) -> int:
    if not text.strip().isdecimal() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; a whole number > 0")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ampsweep", description="Sweep MindSpore mixed-precision settings on Ray and rank them."
    )
    parser.add_argument("--version", action="version", version=f"ampsweep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="validate a spec and list its trials")
    plan.add_argument("spec", type=Path)

    run = sub.add_parser("run", help="run a sweep, then write and print the report")
    run.add_argument("spec", type=Path)
    run.add_argument("--out", required=True, help="output folder or pyarrow.fs URI (s3://, gs://, hdfs://)")
    run.add_argument("--workers", type=_positive_int, help="CPU actors (default: one per core)")
    run.add_argument("--address", help="join this Ray cluster instead of starting one")
    run.add_argument("--devices", choices=("auto", *DEVICE_KINDS), help="override the spec's devices")
    run.add_argument("--compute-on", choices=("cpu",), help="keep scheduling, compute on CPU")
    run.add_argument("--no-progress", action="store_true", help="no live progress bar")
    run.add_argument(
        "--keep-going",
        action="store_true",
        help="run every trial even when the first ones (the FP32 baseline among them) all fail alike",
    )
    run.add_argument("--top", type=_positive_int, default=8, help="ranking rows to print")
    run.add_argument("--tensorboard", metavar="LOGDIR", help="also export each trial there as it commits")

    pull = sub.add_parser("pull", help="copy a sweep's committed trials here, incrementally")
    pull.add_argument(
        "source", help="a sweep folder OUT/<name>: local path, pyarrow.fs URI, or a path on the Ray head"
    )
    pull.add_argument("destination", help="local folder (or URI) that receives <name>/")
    pull.add_argument("--address", help="read SOURCE from the disk of this Ray cluster's head node")

    status = sub.add_parser(
        "status", help="counts of a sweep folder: completed, diverged, failed, missing, running"
    )
    status.add_argument(
        "sweep_dir", help="a sweep folder OUT/<name>: local path, pulled copy or pyarrow.fs URI"
    )

    export = sub.add_parser(
        "export", help="write a sweep's committed trials as TensorBoard runs, incrementally"
    )
    export.add_argument(
        "sweep_dir", help="a sweep folder OUT/<name>: local path, pulled copy or pyarrow.fs URI"
    )
    export.add_argument("--tensorboard", metavar="LOGDIR", required=True, help="TensorBoard's --logdir")

    profile = sub.add_parser(
        "profile", help="one FP32 run with hooks: each Cell's float16 risk and a loss scale"
    )
    profile.add_argument("spec", type=Path)
    profile.add_argument("--steps", type=_positive_int, help="steps to profile (default: the spec's)")
    profile.add_argument("--json", action="store_true", help="one JSON object on the last line of stdout")

    report = sub.add_parser("report", help="(re)write the report of a sweep folder")
    report.add_argument("sweep_dir", type=Path)
    report.add_argument("--top", type=_positive_int, default=8)
    return parser


def _cmd_plan(args: argparse.Namespace) -> int:
    sweep = Sweep.from_yaml(args.spec)
    if sweep.spec.search == "adaptive":
        grid = sweep.spec.grid
        print(
            f"{sweep.name}: search: adaptive — trials are chosen round by round: FP32 baselines on "
            f"{len(grid.seed)} seeds, then each of {', '.join(level for level in grid.amp_level if level != 'O0')} with "
            f"MindSpore's default black list, growing by the localized class (at most {sweep.spec.search_rounds}), "
            f"shrinking, then {len(grid.clip)} clip thresholds and a confirmation round"
        )
        return 0
    plan = sweep.plan()
    for line in plan.lines():
        print(line)
    size = sweep.spec.devices_per_trial
    if size > 1:
        print(
            f"gangs: each of the {len(plan)} trials runs on a gang of {size} devices (data parallel, "
            f"{sweep.spec.placement_strategy}); a cluster of D devices forms D // {size} gangs and runs that "
            f"many trials at once; each batch the workload yields is the global batch, split {size} ways"
        )
    ends = {t.start_step + t.steps for t in plan.trials}
    if sweep.spec.horizon is not None and plan.trials and sweep.spec.horizon > max(ends):
        print(
            f"then: the recommendation (and the runners-up that would replace it) continue from their own "
            f"snapshots at step {max(ends):,} to the horizon, step {sweep.spec.horizon:,}, until one holds"
        )
    return 0


def _print_top(sweep_dir: Path, top: int, spec_dir: Path | None = None) -> None:
    """Write the report, then print the answer and the ranking's top rows (``render_terminal``), flushed."""
    from ampsweep.analysis import NEXT_SPEC_FILE, analyze, render_terminal, write_report

    result = analyze(sweep_dir)
    report = write_report(sweep_dir, analysis=result, spec_dir=spec_dir)
    following = report.with_name(NEXT_SPEC_FILE)
    sys.stdout.write(
        render_terminal(result, top, report, next_spec=following if following.exists() else None)
    )
    sys.stdout.flush()


def _write_profile(sweep: Sweep, root: Path, spec_path: str, run: SweepResult | None = None) -> None:
    """The FP32 float16-headroom profile the report shows, once per folder: a worker's (``run.profile``),
    else run here on a CPU sweep. It never fails the sweep: without it, the report says so in one line."""
    from ampsweep.contracts import PROFILE_FILE, SNAPSHOT_FOLDER

    from ._profile_cmd import profile_sweep

    target = root / PROFILE_FILE
    if target.exists():
        return
    if run is not None and run.profile_error:
        print(f"ampsweep: no FP32 profile in the report ({run.profile_error})", file=sys.stderr)
        return
    if run is not None and run.profile is not None:
        _save_profile(run.profile, target)
        return
    if _device_kinds(root) - {"cpu"}:
        # the profile runs in this process, on its CPU: on a GPU/NPU sweep that can cost far more
        # than a trial did on the device, so it is the user's call there
        print(f"ampsweep: for the float16 headroom profile, run `ampsweep profile {spec_path}` on a device")
        return
    try:
        found = profile_sweep(sweep, snapshots=root.parent / SNAPSHOT_FOLDER)
    except Exception as exc:  # noqa: BLE001 - the trials are committed; the profile is extra
        print(f"ampsweep: no FP32 profile in the report ({type(exc).__name__}: {exc})", file=sys.stderr)
        return
    _save_profile(found, target)


def _save_profile(found: Profile, target: Path) -> None:
    """``profile.json``, written whole or not at all (a full disk leaves no temporary file)."""
    temporary = target.with_name(f".tmp-{target.name}")
    try:
        temporary.write_text(json.dumps(found.as_json(), allow_nan=False, default=_plain) + "\n")
        temporary.replace(target)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def _device_kinds(root: Path) -> set[str]:
    """The device kinds the sweep's committed trials ran on."""
    import pyarrow.dataset as ds

    try:
        table = ds.dataset(root / "trials", format="parquet").to_table(columns=["device_kind"])
    except (OSError, ValueError):
        return set()
    return {str(kind) for kind in table.column("device_kind").to_pylist() if kind}


def _plain(value: object) -> object:
    """NumPy numbers in the profile, as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def _cmd_run(args: argparse.Namespace) -> int:
    config = RunConfig(
        workers=args.workers,
        address=args.address,
        devices=args.devices,
        compute_on=args.compute_on,
        progress=not args.no_progress,
        keep_going=args.keep_going,
        # the report's FP32 profile, run by the first worker the trials leave idle
        profile="://" not in args.out,
        tensorboard=args.tensorboard,
    )
    try:
        sweep, pool = _checked_beside_ray(args.spec, args.out, config)
        if pool is None:
            result = sweep.run(args.out, config)
        else:
            with pool:
                result = sweep._run_on(pool, args.out, pool.config)
    except BaseException as exc:
        if args.whole_process:
            _stop_ray()
        if not isinstance(exc, SweepStopped):
            raise
        if exc.detail:
            print(exc.detail, file=sys.stderr)
        resume = "ampsweep " + shlex.join(args.argv)
        print(f"ampsweep: stopped: {exc}; resume with: {resume}", file=sys.stderr, flush=True)
        return exc.exit_code
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items())) or "nothing new"
    if result.copied:
        counts += f"; {result.copied} copied from a trial that computes the same, not trained"
    done = f"{sweep.name}: {result.ran} trials run ({counts}), {result.skipped} already done; results in {result.root}"
    if not result.is_local:
        if args.whole_process:
            _stop_ray()
        print(done)
        print(
            f"report: `ampsweep pull {args.out.rstrip('/')}/{sweep.name} DIR`, then `ampsweep report DIR/{sweep.name}`"
        )
        return 0

    def report() -> None:  # the answer first, then the table; what ran is a footnote
        _write_profile(sweep, Path(result.root), args.spec, result)
        _print_top(Path(result.root), args.top, Path(args.spec).parent)

    with ThreadPoolExecutor(1, thread_name_prefix="ampsweep-report") as reporting:
        written = reporting.submit(report)
        if args.whole_process:
            _stop_ray()  # Ray's processes end (1-2 s) while the report is written: it needs none of them
        written.result()
    print(done)
    return 0


def _checked_beside_ray(path: Path, out: str, config: RunConfig) -> tuple[Sweep, WorkerPool | None]:
    """The validated sweep in ``path`` (the spec and the workload's file first: a typo costs no cluster
    start); for a folder not on disk yet, which no refusal of ``run_sweep`` can apply to, checked while its
    first actors start, with the pool that holds them."""
    spec = read_spec(path)
    resolve_workload(spec, path.parent)
    check_logdir(f"{out.rstrip('/')}/{spec.name}", config.tensorboard)
    ray = sys.modules.get("ray")
    joined = cluster_address(config.address) is not None or (ray is not None and ray.is_initialized())
    if joined or "://" in out or (Path(out) / spec.name).exists():
        return Sweep(spec, base_dir=path.parent), None
    # a gang's pool is shaped by its plan (``use_gangs``) before it asks for actors
    first = trials_to_train(spec) if spec.devices_per_trial == 1 else 0
    return checked_while_actors_start(
        lambda: Sweep(spec, base_dir=path.parent), completed(spec, config), spec.devices, first
    )


def _stop_ray() -> None:
    """End this process's Ray. Garbage is collected first: a dead actor's error holds its handle in a
    reference cycle, and releasing that handle after the shutdown reaches a core worker that is gone."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    import gc

    gc.collect()
    ray.shutdown()


def _cmd_pull(args: argparse.Namespace) -> int:
    from .store._pull import pull

    result = pull(_sweep_folder(args.source, "source", args.address), args.destination)
    print(
        f"pulled {result.copied} new trials into {result.destination} ({result.already_there} were already there)"
    )
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from .store._status import sweep_status

    try:
        status = sweep_status(args.sweep_dir)
    except FileNotFoundError as exc:
        raise SpecError("sweep_dir", args.sweep_dir, f"a sweep folder OUT/<name> ({exc})") from None
    print("\n".join(status.lines()))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from ampsweep.analysis import export_tensorboard

    check_writer(args.tensorboard)
    _sweep_folder(args.sweep_dir)
    check_logdir(args.sweep_dir, args.tensorboard)
    done = export_tensorboard(args.sweep_dir, args.tensorboard)
    again = f", {done.rewritten} written again: what they show changed" if done.rewritten else ""
    print(f"exported {done.written} new trials to {done.folder} ({done.already} were already there{again})")
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from ._profile_cmd import as_json_line, profile_sweep, render

    sweep = Sweep.from_yaml(args.spec)
    result = profile_sweep(sweep, args.steps)
    print("\n".join([as_json_line(result)] if args.json else render(sweep.name, result)))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    _sweep_folder(str(args.sweep_dir))
    _print_top(args.sweep_dir, args.top)
    return 0


def _sweep_folder(location: str, field: str = "sweep_dir", address: str | None = None) -> SweepSource:
    """The sweep folder at ``location`` (a path, a URI, or a path on the Ray head at ``address``); one
    without ``trials/`` is a usage error, before anything reads it."""
    from .store._pull import open_source

    try:
        return open_source(location, address)
    except FileNotFoundError as exc:
        raise SpecError(field, location, f"a sweep folder OUT/<name> with a trials/ folder ({exc})") from None


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    whole_process = argv is None  # the command itself (console script, python -m), not a caller's call
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    args.argv = argv  # the exact command, for the resume line
    args.whole_process = whole_process  # the command owns its Ray: it ends it when done
    commands = {
        "plan": _cmd_plan,
        "run": _cmd_run,
        "pull": _cmd_pull,
        "status": _cmd_status,
        "report": _cmd_report,
        "profile": _cmd_profile,
        "export": _cmd_export,
    }
    # SIGTERM (a scheduler, `kill`) stops a run like Ctrl-C: committed trials stay, resume line printed
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return commands[args.command](args)
    except SpecError as exc:
        print(f"ampsweep: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SweepStopped as stop:  # outside `run`, which says it itself: e.g. `pull` into a full disk
        print(f"ampsweep: stopped: {stop}; resume with: ampsweep {shlex.join(argv)}", file=sys.stderr)
        return stop.exit_code
    except BrokenPipeError:
        # `ampsweep plan spec.yaml | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if not is_out_of_space(exc):
            raise
        return _out_of_space(args, exc)


def _out_of_space(args: argparse.Namespace, exc: OSError) -> int:
    """A full disk outside the store (the report, profile.json): one line, the file and the command that
    writes it again (``ampsweep report DIR`` for a report file, else the same command)."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    target = Path(exc.filename) if isinstance(exc.filename, str) else None
    what = f"could not write to {args.out}" if args.command == "run" else "could not write a file"
    again = "ampsweep " + shlex.join(args.argv)
    if target is not None:
        what = f"could not write {target.parent.name}/{target.name} in {target.parent.parent}"
        if target.parent.name == "report":
            again = "ampsweep report " + shlex.quote(str(target.parent.parent))
    print(f"ampsweep: stopped: {what}: {reason}; rerun with: {again}", file=sys.stderr, flush=True)
    return OutOfSpace.exit_code


if __name__ == "__main__":
    sys.exit(main())
