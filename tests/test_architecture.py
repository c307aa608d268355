"""The architecture's rules, checked on the source: each concept has one home."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from ldp_telemetry.shared import attribute_types, mechanisms

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("aggregator", "client", "shared", "tools", "relay")


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


def imported_folders(path: Path) -> set[str]:
    """The repository folders (``aggregator/http``, ``client``, ...) that ``path``'s relative
    imports reach, each import resolved against the file's own package."""
    package = path.parent
    reached = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package
            for _ in range(node.level - 1):
                base = base.parent
            target = base.joinpath(*(node.module or "").split(".")) if node.module else base
            names = [target / alias.name for alias in node.names] if not node.module else [target]
            for t in names:
                folder = t if t.is_dir() else t.parent
                reached.add(folder.relative_to(ROOT).as_posix() if ROOT in folder.parents or folder == ROOT
                            else str(folder))
    return reached


# Who may import whom, by folder: the layers go down (HTTP and dashboard -> ingest, questions and
# estimation -> store -> shared; the store never calls up into counting or the catalog), the app-wide modules of aggregator/ serve every area, and the
# tools sit on top of everything. A folder not listed here may import only itself and shared.
ALLOWED = {
    "aggregator": {"aggregator", "aggregator/http", "aggregator/ingest", "aggregator/estimation",
                   "aggregator/questions", "aggregator/dashboard", "aggregator/store", "shared"},
    "aggregator/http": {"aggregator", "aggregator/http", "aggregator/ingest", "aggregator/estimation",
                        "aggregator/questions", "aggregator/store", "shared"},
    "aggregator/dashboard": {"aggregator", "aggregator/dashboard", "aggregator/estimation", "aggregator/questions",
                             "aggregator/store", "shared"},
    "aggregator/ingest": {"aggregator", "aggregator/ingest", "aggregator/store", "shared"},
    # Questions added later: recorded, back-filled (counting, as ingest counts), estimated.
    "aggregator/questions": {"aggregator", "aggregator/questions", "aggregator/ingest", "aggregator/store", "shared"},
    "aggregator/estimation": {"aggregator", "aggregator/estimation", "aggregator/store", "shared"},
    "aggregator/store": {"aggregator/store", "shared"},
    "client": {"client", "shared"},
    # The relay is a service of its own, run by another party: it reads the shared wire format and
    # nothing of the aggregator (its store, ingest, catalog) or of the client.
    "relay": {"relay", "shared"},
    "shared": {"shared", "shared/mechanisms"},
    "shared/mechanisms": {"shared", "shared/mechanisms"},
}


def test_each_area_imports_only_the_layers_below_it():
    found = []
    for folder, allowed in ALLOWED.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            for reached in sorted(imported_folders(path) - allowed):
                found.append(f"{path.relative_to(ROOT)} imports {reached}")
    assert found == []


def test_the_service_imports_no_client_and_no_tool():
    found = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "aggregator").rglob("*.py"))
             if imported_folders(path) & {"client", "tools"}]
    assert found == []


def test_the_relay_imports_nothing_of_the_aggregator_or_the_client():
    # By module name too: ``ldp_telemetry.aggregator...`` written out is no relative import.
    found = [f"{path.relative_to(ROOT)}: {module}"
             for path in sorted((ROOT / "relay").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, (ast.Import, ast.ImportFrom))
             for module in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
             if module.startswith(("ldp_telemetry.aggregator", "ldp_telemetry.client"))]
    assert found == []


def test_only_the_store_imports_a_database_driver():
    # The aggregator's database sits behind aggregator/store/; the client's outbox is the client's
    # own store (its file on the device) and keeps its sqlite3, and so does the benchmark's naive
    # durable app (bench/naive.py), a separate app with its own database that ours is compared with.
    # The relay's one file is its own too, behind relay/store.py.
    drivers = {"sqlite3", "sqlite_utils", "psycopg", "psycopg_pool"}
    store, naive, relay_store = ROOT / "aggregator" / "store", ROOT / "bench" / "naive.py", ROOT / "relay" / "store.py"
    found = [f"{path.relative_to(ROOT)}: {sorted(imported_modules(path) & drivers)}"
             for folder in ("aggregator", "shared", "bench", "relay") for path in sorted((ROOT / folder).rglob("*.py"))
             if store not in path.parents and path not in (naive, relay_store) and imported_modules(path) & drivers]
    assert found == []


def test_no_module_switches_on_an_attribute_types_name():
    # A type's name compared with (or used as a key of) anything outside shared/attribute_types.py is
    # a dispatch that the type's object (attribute.kind) should answer instead. Schema literals such
    # as {"type": "boolean"} are data, not dispatch, and are not flagged.
    names = set(attribute_types.REGISTRY)
    home = ROOT / "shared" / "attribute_types.py"

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in node.elts)

    found = []
    for path in [*sources(".py"), *sorted((ROOT / "bench").rglob("*.py"))]:
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and any(named(o) for o in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a comparison with a type name")
            elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a table keyed by type names")
    assert found == []


def test_the_mechanisms_import_nothing_of_the_schema():
    # schema -> attribute_types -> mechanisms, one way: a mechanism reads its attribute through the
    # Target protocol it defines.
    found = []
    for path in sorted((ROOT / "shared" / "mechanisms").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level >= 2 and \
                    node.module.split(".")[0] in ("schema", "attribute_types", "reports", "simulation", "planner"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}{node.module}")
    assert found == []


def test_make_test_checks_the_types_before_it_runs_the_tests():
    # `make -n` prints the recipes without running them; SKIP_JS keeps the JS step's sub-make out.
    dry = subprocess.run(["make", "-n", "test", "SKIP_JS=1"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = dry.stdout.splitlines()
    mypy = next(i for i, line in enumerate(lines) if line.endswith("/bin/mypy"))
    assert mypy < next(i for i, line in enumerate(lines) if " -m pytest" in line)


def test_every_type_ignore_names_its_error_and_says_why():
    # `# type: ignore[code]  # reason`: mypy silences that one error, and the next reader learns why.
    explained = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S")
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sources(".py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"#\s*type:\s*ignore", line) and not explained.search(line)]
    assert found == []
