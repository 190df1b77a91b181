"""``python -m ampsweep.analysis DIR``: write the report without the full ``ampsweep`` CLI.

Kept dependency-free (argparse, no rich) so it runs wherever pyarrow does.
"""

from __future__ import annotations

import argparse
import sys

from ._writer import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ampsweep.analysis", description=__doc__)
    parser.add_argument(
        "sweep_dir",
        help="a sweep folder, OUT/<sweep-name> (local path or pyarrow.fs URI)",
    )
    parser.add_argument("--out", default=None, help="report folder (default: SWEEP_DIR/report)")
    args = parser.parse_args(argv)
    path = write_report(args.sweep_dir, args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
