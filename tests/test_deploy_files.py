"""The deployment files agree with the code: paths, settings, health check, package data.

Docker and systemd cannot run in this test environment; these checks catch the mistakes that
would only show on a real deployment (a setting that does not exist, a file the image lacks).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import yaml

from ldp_telemetry.aggregator.settings import BY_NAME
from ldp_telemetry.relay.settings import SETTINGS as RELAY_SETTINGS

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
# Read by docker-compose.yml itself (its `serve --workers`), not by the aggregator's settings.
COMPOSE_VARIABLES = {"LDP_WORKERS"}
RELAY_VARIABLES = {setting.variable for setting in RELAY_SETTINGS}


def test_compose_keeps_the_database_on_a_volume_and_checks_health():
    service = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["aggregator"]
    environment = service["environment"]
    assert environment["LDP_DB"].startswith("/data/")
    assert "ldp-data:/data" in service["volumes"]
    assert all(port.startswith("127.0.0.1:") for port in service["ports"])  # only the local proxy reaches it
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    for name in environment:
        assert name in BY_NAME, f"{name} is no setting"
    assert service["command"][:2] == ["ldp-telemetry", "serve"]
    assert service["command"][service["command"].index("--host") + 1] == "0.0.0.0"  # the container's port


def test_dockerfile_installs_what_the_command_needs():
    text = (DEPLOY / "Dockerfile").read_text()
    for folder in ("shared", "client", "aggregator"):
        assert re.search(rf"^COPY {folder} \./{folder}$", text, re.M)
    assert 'CMD ["ldp-telemetry", "serve", "--host", "0.0.0.0", "--port", "8000",' in text
    assert "pip install '.[aggregator]'" in text
    assert re.search(r"^USER ldp$", text, re.M)  # not root
    assert "/healthz" in text


def test_systemd_unit_runs_serve():
    # A unit file repeats keys (Environment=), which configparser cannot hold: read the lines.
    lines = [line.partition("=") for line in (DEPLOY / "ldp-telemetry.service").read_text().splitlines()
             if "=" in line and not line.startswith("#")]
    unit: dict[str, list[str]] = {}
    for key, _, value in lines:
        unit.setdefault(key, []).append(value)
    assert unit["ExecStart"] == ["/opt/ldp-telemetry/venv/bin/ldp-telemetry serve --host 127.0.0.1 --port 8000 "
                                 "--workers 2 --access-log"]
    assert unit["StateDirectory"] == ["ldp-telemetry"]
    assert "LDP_DB=/var/lib/ldp-telemetry/ldp-telemetry.db" in unit["Environment"]
    assert unit["WantedBy"] == ["multi-user.target"]


def test_deploy_files_name_only_real_settings():
    names = set()
    for path in DEPLOY.iterdir():
        names |= set(re.findall(r"\bLDP_[A-Z_]+[A-Z]\b", path.read_text()))
    assert names
    known = set(BY_NAME) | COMPOSE_VARIABLES | RELAY_VARIABLES
    assert names <= known, names - known
    readme = (DEPLOY / "README.md").read_text()
    for name in COMPOSE_VARIABLES:  # the compose file's own: documented here, nowhere else
        assert f"`{name}`" in readme, name


def test_dashboard_files_are_in_the_package_data():
    """A wheel (the Docker image installs one) carries only files the package-data globs match."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "ldp_telemetry.aggregator.dashboard"]
    dashboard = ROOT / "aggregator" / "dashboard"
    files = [p.relative_to(dashboard).as_posix() for folder in ("templates", "static")
             for p in (dashboard / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    for name in files:
        assert any(fnmatch.fnmatch(name, g) and name.count("/") == g.count("/") for g in globs), name


def test_the_postgresql_compose_runs_three_nodes_on_one_database_behind_nginx():
    compose = yaml.safe_load((DEPLOY / "docker-compose.postgres.yml").read_text())
    services = compose["services"]
    nodes = [services[f"node{i}"] for i in (1, 2, 3)]
    for node in nodes:
        assert node["environment"]["LDP_DB"].startswith("postgresql://") and "@postgres:5432/" in node["environment"]["LDP_DB"]
        assert all(name in BY_NAME for name in node["environment"]), node["environment"]
        assert node["command"][:2] == ["ldp-telemetry", "serve"] and "ports" not in node  # only nginx reaches them
        assert node["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "/healthz" in " ".join(node["healthcheck"]["test"])
    assert len({node["environment"]["LDP_DB"] for node in nodes}) == 1  # one database
    assert services["postgres"]["image"].startswith("postgres:")
    assert "pg-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    assert all(port.startswith("127.0.0.1:") for port in services["nginx"]["ports"])
    assert "pg_dump" in " ".join(services["backup"]["command"])
    conf = (DEPLOY / "nginx-nodes.conf").read_text()
    assert re.findall(r"^\s*server (node\d):8000", conf, re.M) == ["node1", "node2", "node3"]
    assert "./nginx-nodes.conf:/etc/nginx/conf.d/default.conf:ro" in services["nginx"]["volumes"]
    assert "$remote_addr" not in conf and 'X-Forwarded-For ""' in conf


def test_the_relay_has_its_compose_service_unit_and_page():
    service = yaml.safe_load((DEPLOY / "docker-compose.relay.yml").read_text())["services"]["relay"]
    assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert service["command"][:2] == ["ldp-telemetry", "relay"]
    assert service["command"][service["command"].index("--host") + 1] == "0.0.0.0"
    assert service["environment"]["LDP_RELAY_DB"].startswith("/data/") and "relay-data:/data" in service["volumes"]
    assert set(service["environment"]) <= RELAY_VARIABLES
    assert all(port.startswith("127.0.0.1:") for port in service["ports"])
    assert "8001/healthz" in " ".join(service["healthcheck"]["test"])
    assert re.search(r"^COPY relay \./relay$", (DEPLOY / "Dockerfile").read_text(), re.M)
    unit = (DEPLOY / "ldp-telemetry-relay.service").read_text()
    assert "ExecStart=/opt/ldp-telemetry/venv/bin/ldp-telemetry relay --host 127.0.0.1 --port 8001" in unit
    assert "Environment=LDP_RELAY_DB=/var/lib/ldp-telemetry-relay/relay.db" in unit
    assert "StateDirectory=ldp-telemetry-relay" in unit
    page = (DEPLOY / "RELAY.md").read_text()
    for setting in RELAY_SETTINGS:  # every setting in the table, with its flag and its default
        default = "required" if setting.default is None else str(setting.default)
        assert f"| `{setting.flag}` | `{setting.variable}` | {default} |" in page, setting.variable


def test_the_relays_proxy_keeps_and_forwards_no_client_address():
    conf = (DEPLOY / "nginx-relay.conf").read_text()
    log_format = re.search(r"^log_format relay_private (.*);$", conf, re.M).group(1)
    assert "$remote_addr" not in log_format and "$http_" not in log_format and "$time" not in log_format
    assert re.search(r"^\s*access_log \S+ relay_private;", conf, re.M)
    assert "proxy_pass http://127.0.0.1:8001;" in conf and "client_max_body_size 64k;" in conf
    assert 'X-Forwarded-For ""' in conf and 'X-Real-IP ""' in conf and 'Forwarded ""' in conf
    # the slow-down is keyed by address in nginx's memory: never a file
    assert re.search(r"^limit_req_zone \$binary_remote_addr zone=relay_posts:\d+m", conf, re.M)
