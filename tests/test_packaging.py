"""The distribution: build the wheel, install it into a fresh venv, import it from outside the repo.

Building runs pip's isolated build (it fetches the build backend from the configured index, as any
`pip install .` does); installing uses --no-deps --no-index, so nothing else is downloaded. The
runtime dependencies come from this checkout's .venv through PYTHONPATH (which, unlike a site
directory, does not activate the editable install there), or, for the client, from a directory
holding only `requests` and its own dependencies, to show that the client needs nothing more.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from ldp_telemetry.serving.loop import EVENT_LOOP

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "README.md", "client", "aggregator", "shared", "tools", "relay", "serving"]
PACKAGES = ["ldp_telemetry.client", "ldp_telemetry.aggregator", "ldp_telemetry.shared", "ldp_telemetry.tools",
            "ldp_telemetry.relay", "ldp_telemetry.serving"]
REQUESTS_AND_ITS_DEPENDENCIES = ["requests", "urllib3", "idna", "charset_normalizer", "certifi"]

pytestmark = pytest.mark.timeout(600)


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=540, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The wheel, built from a copy of the sources (so the build leaves nothing in the checkout),
    and a fresh venv with it installed."""
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    build = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", root / "dist", source)
    (wheel,) = (root / "dist").glob("ldp_telemetry-*.whl")
    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel)
    return {"root": root, "wheel": wheel, "venv": venv, "python": python, "build_output": build.stdout + build.stderr}


def in_fresh_venv(built: dict[str, Path], code: str, pythonpath: list[Path]) -> str:
    """Run ``code`` with the fresh venv's python, from a folder outside the repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    # -s: no user site-packages, so only the venv, and the PYTHONPATH given, are seen
    return run(built["python"], "-s", "-c", code, cwd=built["root"], env=env).stdout


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def test_the_wheel_holds_the_three_packages_under_one_import_root(built):
    with zipfile.ZipFile(built["wheel"]) as archive:
        names = archive.namelist()
    roots = {n.split("/")[0] for n in names}
    assert {r for r in roots if not r.endswith(".dist-info")} == {"ldp_telemetry"}
    for package in PACKAGES:
        assert package.replace(".", "/") + "/__init__.py" in names
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")]


def test_the_wheel_carries_the_dashboard_files_without_a_setuptools_warning(built):
    with zipfile.ZipFile(built["wheel"]) as archive:
        names = set(archive.namelist())
    dashboard = REPO / "aggregator" / "dashboard"
    files = [p.relative_to(dashboard).as_posix() for folder in ("templates", "static")
             for p in (dashboard / folder).iterdir() if p.is_file()]
    assert files
    for name in files:
        assert f"ldp_telemetry/aggregator/dashboard/{name}" in names, name
    # The data folders are listed as packages: no "Package would be ignored" on every pip install.
    assert "would be ignored" not in built["build_output"].lower(), built["build_output"][-3000:]


def test_the_base_install_needs_only_requests(built):
    requirements = [Requirement(r) for r in metadata(built["wheel"]).get_all("Requires-Dist")]
    base = [r for r in requirements if r.marker is None]
    assert [r.name for r in base] == ["requests"]


def test_the_aggregator_extra(built):
    requirements = [Requirement(r) for r in metadata(built["wheel"]).get_all("Requires-Dist")]
    extra = {r.name.lower(): r.specifier for r in requirements
             if r.marker is not None and r.marker.evaluate({"extra": "aggregator"})}
    assert {"flask", "sqlite-utils", "apscheduler", "numpy"} <= set(extra)
    # sqlite-utils 4.x: what .venv runs, not 3 and not 5
    assert extra["sqlite-utils"].contains("4.2") and not extra["sqlite-utils"].contains("5.0")
    assert not extra["sqlite-utils"].contains("3.38")
    # APScheduler 3.x: version 4 is another API
    assert extra["apscheduler"].contains("3.11") and not extra["apscheduler"].contains("4.0")
    assert not extra["apscheduler"].contains("4.0.0a6", prereleases=True)
    assert extra["flask"].contains("3.1")
    # serve and the relay name granian's event loop (serving/loop.py): it comes with granian's extra
    granian = next(r for r in requirements if r.name == "granian")
    assert EVENT_LOOP in granian.extras


def test_the_relay_extra_is_cryptography_alone(built):
    """A client that sends through a relay needs ``ldp-telemetry[relay]``: cryptography, and nothing
    else; the aggregator (the relay gateway) needs it too."""
    requirements = [Requirement(r) for r in metadata(built["wheel"]).get_all("Requires-Dist")]
    def extra(name: str) -> dict[str, Any]:
        return {r.name.lower(): r.specifier for r in requirements
                if r.marker is not None and r.marker.evaluate({"extra": name})}
    assert set(extra("relay")) == {"cryptography"}
    assert extra("relay")["cryptography"].contains("48.0") and "cryptography" in extra("aggregator")


def test_one_console_script(built):
    with zipfile.ZipFile(built["wheel"]) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points = archive.read(name).decode()
    assert "[console_scripts]\nldp-telemetry = ldp_telemetry.tools.cli:main" in entry_points
    assert (built["venv"] / "bin" / "ldp-telemetry").exists()


def test_all_three_packages_import_from_the_installed_wheel(built):
    site_packages = Path(sysconfig.get_paths()["purelib"])  # this .venv's: flask, numpy, ...
    out = in_fresh_venv(built, "import ldp_telemetry.client, ldp_telemetry.aggregator, ldp_telemetry.shared, "
                               "ldp_telemetry.tools.cli, ldp_telemetry.shared.simulation\n"
                               "for m in (ldp_telemetry.client, ldp_telemetry.aggregator, ldp_telemetry.shared):\n"
                               "    print(m.__file__)", [site_packages])
    files = out.split()
    assert len(files) == 3
    assert all(Path(f).is_relative_to(built["venv"]) for f in files), files


def only(built: dict[str, Path], names: list[str]) -> Path:
    """A folder holding only ``names`` of this .venv's packages (as links), for a PYTHONPATH."""
    folder = built["root"] / "-".join(["only", *names[:1], *names[len(REQUESTS_AND_ITS_DEPENDENCIES):]])
    folder.mkdir(exist_ok=True)
    site_packages = Path(sysconfig.get_paths()["purelib"])
    for name in names:
        if not (folder / name).exists():
            (folder / name).symlink_to(site_packages / name)
    return folder


def test_the_client_imports_with_requests_alone(built):
    only_requests = only(built, REQUESTS_AND_ITS_DEPENDENCIES)
    # shared.ohttp too: the client imports it whether or not it has a relay; cryptography (the relay
    # extra) is imported only when something is encapsulated.
    out = in_fresh_venv(built, "import sys, ldp_telemetry.client, ldp_telemetry.shared, ldp_telemetry.shared.ohttp\n"
                               "from ldp_telemetry.client import TelemetryClient, randomize\n"
                               "print(sorted({'flask', 'numpy', 'sqlite_utils', 'apscheduler', 'click', 'cryptography'} "
                               "& set(sys.modules)))\n"
                               "print(ldp_telemetry.client.__file__)", [only_requests])
    heavy, client_file = out.splitlines()
    assert heavy == "[]"
    assert Path(client_file).is_relative_to(built["venv"])


def test_the_installed_console_script_runs(built):
    site_packages = Path(sysconfig.get_paths()["purelib"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site_packages)
    out = run(built["venv"] / "bin" / "ldp-telemetry", "simulate", "--devices", "1000", cwd=built["root"], env=env)
    assert "intervals cover the truth" in out.stdout


def test_the_command_in_a_client_only_install_says_how_to_get_it(built):
    # Issue 31: `pip install ldp-telemetry` (the client, as apps install it) also installs the
    # `ldp-telemetry` script, which died with "ModuleNotFoundError: No module named 'click'".
    from ldp_telemetry.tools.cli import NEEDS_AGGREGATOR

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(only(built, REQUESTS_AND_ITS_DEPENDENCIES))
    done = subprocess.run([str(built["venv"] / "bin" / "ldp-telemetry"), "--help"], capture_output=True, text=True,
                          cwd=built["root"], env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr == f"{NEEDS_AGGREGATOR} (missing: click)\n" and done.stdout == ""
    assert "pip install 'ldp-telemetry[aggregator]'" in NEEDS_AGGREGATOR


def test_a_command_whose_extra_is_missing_says_how_to_get_it(built):
    # Click alone (an app may use it) is not the aggregator's extra: `serve` needs Flask and the rest.
    from ldp_telemetry.tools.cli import NEEDS_AGGREGATOR

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(only(built, [*REQUESTS_AND_ITS_DEPENDENCIES, "click"]))
    done = subprocess.run([str(built["venv"] / "bin" / "ldp-telemetry"), "serve", "--port", "0"], capture_output=True,
                          text=True, cwd=built["root"], env=env, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == f"{NEEDS_AGGREGATOR} (missing: flask)\n"
