"""Benchmarks for ampsweep's own costs, run by ``make bench`` (``python -m benchmarks``).

Each ``benchmarks/bench_*.py`` module exposes ``run() -> str``: it measures one
claim and returns a Markdown section (a ``##`` heading, a table and a verdict).
``python -m benchmarks`` runs every module, each in a fresh process so one
benchmark's MindSpore thread settings or Ray session cannot skew the next, and
writes ``benchmarks/RESULTS.md``; ``python -m benchmarks bench_capture`` reruns
one section and keeps the others.
"""

from __future__ import annotations
