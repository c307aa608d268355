"""The architecture's rules, checked on the source: each concept has one home."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ldp_telemetry.shared import mechanisms

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("aggregator", "client", "shared")


def sources(suffix: str) -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob(f"*{suffix}"))]


def test_no_mechanism_name_appears_outside_the_registry():
    # A mechanism's name as a string literal outside shared/mechanisms/ is a comparison (or a
    # table) that the registry's objects should answer instead.
    names = set(mechanisms.REGISTRY)
    registry = ROOT / "shared" / "mechanisms"
    found = []
    for path in sources(".py"):
        if registry in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    quoted = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, names)))
    for path in sources(".html"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_only_the_store_imports_a_database_driver():
    # The aggregator's database sits behind aggregator/store/; the client's outbox is the client's
    # own store (its file on the device) and keeps its sqlite3.
    drivers = {"sqlite3", "sqlite_utils", "psycopg", "psycopg_pool"}
    store = ROOT / "aggregator" / "store"
    found = [f"{path.relative_to(ROOT)}: {sorted(imported_modules(path) & drivers)}"
             for folder in ("aggregator", "shared", "bench") for path in sorted((ROOT / folder).rglob("*.py"))
             if store not in path.parents and imported_modules(path) & drivers]
    assert found == []
