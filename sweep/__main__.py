"""``python -m ampsweep`` is the ``ampsweep`` command."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
