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
