"""mkdocs hooks for the ampsweep site (registered under ``hooks:`` in mkdocs.yml).

Three jobs, so that no page restates what the code or another file owns:

- ``<!-- schema: trials -->``: a table of the columns of
  ``ampsweep.contracts.TABLE_SCHEMAS["trials"]``: names and types read from the
  schema itself, the meaning of each column from the field's metadata
  (``description``) or else from ``ampsweep.contracts.COLUMN_DOCS``. A column
  with no meaning is a warning (an error under ``--strict``).
- ``<!-- include: path/from/repo/root.md -->``: that file's text without its
  title (the page keeps its own). ``README.md`` included into
  ``index.md`` gets its ``docs/`` links rewritten to the site's.
- The API reference (mkdocstrings) reads the sources statically, but the parts
  live in ``sweep/``, ``jobs/`` and ``analysis/`` and only packaging maps them
  into ``ampsweep.*`` (``[tool.setuptools.package-dir]``). ``on_config`` copies
  them into ``build/docs-api/ampsweep/`` as installed, the folder mkdocs.yml
  gives the python handler as its ``paths``.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
API_SRC = ROOT / "build" / "docs-api"

log = logging.getLogger("mkdocs.hooks.ampsweep")

SCHEMA_MARKER = re.compile(r"^<!-- schema: (?P<table>[\w-]+) -->$", re.M)
INCLUDE = re.compile(r"^<!-- include: (?P<path>\S+) -->$", re.M)
FENCE = re.compile(r"^(```|~~~)")


# --- the API reference's source tree ------------------------------------------------------------


def package_dirs() -> dict[str, Path]:
    """``[tool.setuptools.package-dir]``: import name -> folder in the checkout."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def build_api_tree(dest: Path = API_SRC) -> Path:
    """Copy the packages into ``dest`` laid out as installed (``ampsweep/sweep/...``)."""
    shutil.rmtree(dest, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # parents before children: ampsweep/ first, then ampsweep/sweep/ inside it
    for name, folder in sorted(package_dirs().items(), key=lambda item: item[0].count(".")):
        shutil.copytree(folder, dest.joinpath(*name.split(".")), ignore=ignore, dirs_exist_ok=True)
    return dest


# --- schema tables --------------------------------------------------------------------------------


def _meanings(table: str) -> dict[str, str]:
    """Column -> meaning: the field's metadata ``description`` wins over ``COLUMN_DOCS``."""
    import ampsweep.contracts as contracts

    meanings = dict(getattr(contracts, "COLUMN_DOCS", {}).get(table, {}))
    for field in contracts.TABLE_SCHEMAS[table]:
        description = (field.metadata or {}).get(b"description")
        if description:
            meanings[field.name] = description.decode("utf-8")
    return meanings


def schema_table(table: str, page: str = "") -> str:
    """The Markdown table of one contract schema: column, type, meaning."""
    from ampsweep.contracts import TABLE_SCHEMAS

    if table not in TABLE_SCHEMAS:
        raise PluginError(
            f"{page}: <!-- schema: {table} --> names no table; known: {', '.join(TABLE_SCHEMAS)}"
        )
    meanings = _meanings(table)
    rows = ["| column | type | meaning |", "|---|---|---|"]
    for field in TABLE_SCHEMAS[table]:
        meaning = meanings.get(field.name)
        if not meaning:
            log.warning("%s: schema %s: column `%s` has no meaning in the contracts", page, table, field.name)
            meaning = ""
        rows.append(f"| `{field.name}` | `{field.type}` | {meaning.replace('|', '&#124;')} |")
    return "\n".join(rows) + "\n"


# --- includes -------------------------------------------------------------------------------------


def drop_title(text: str) -> str:
    """The text without its first level-1 heading (the including page has its own title)."""
    lines = text.splitlines()
    fenced = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            del lines[index]
            break
    return "\n".join(lines).lstrip("\n") + "\n"


def include(path: str, page: str = "") -> str:
    source = (ROOT / path).resolve()
    if ROOT not in source.parents or not source.is_file():
        raise PluginError(f"{page}: <!-- include: {path} -->: no such file in the repository")
    text = drop_title(source.read_text(encoding="utf-8"))
    if path == "README.md":
        # the README links into docs/ from the repository root; the site is docs/ itself
        text = re.sub(r"\]\(docs/", "](", text)
    return text


# --- mkdocs events --------------------------------------------------------------------------------


@event_priority(100)  # before mkdocstrings' on_config, which sets up the python handler's paths
def on_config(config: Any) -> Any:
    build_api_tree()
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    name = page.file.src_uri
    markdown = INCLUDE.sub(lambda match: include(match["path"], name), markdown)
    return SCHEMA_MARKER.sub(lambda match: schema_table(match["table"], name), markdown)


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    for path in ("README.md", "benchmarks/RESULTS.md", "ampsweep/contracts", "sweep", "jobs", "analysis"):
        server.watch(str(ROOT / path))
    return server
