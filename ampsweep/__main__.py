"""``python -m ampsweep`` is the ``ampsweep`` command."""

from __future__ import annotations

import sys

from ampsweep.sweep.cli import main

sys.exit(main())
