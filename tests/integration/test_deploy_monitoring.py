"""deploy/ offline, for watching a run: the Grafana dashboard's JSON is what its generator
builds (deploy/grafana/dashboard.py, grafana-foundation-sdk), and Debian's `promtool check
config` accepts the Prometheus configuration deploy/ansible's role writes on the coordinator.
Whether Prometheus accepts the dashboard's queries is checked against a live run
(tests/integration/test_live_metrics.py)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

GRAFANA = ROOT / "deploy" / "grafana"
ROLES = ROOT / "deploy" / "ansible" / "roles"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_the_dashboard_json_is_the_generators_output():
    spec = importlib.util.spec_from_file_location("dashboard", GRAFANA / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (GRAFANA / "fanout-bench.json").read_text() == module.render(), (
        "deploy/grafana/fanout-bench.json is stale: run `python deploy/grafana/dashboard.py`"
    )


def test_promtool_accepts_the_deploys_prometheus_config(tmp_path: Path):
    if not Path(PROMTOOL).exists():
        pytest.skip(f"no {PROMTOOL}: install Debian's prometheus (.ci/install-tools.sh)")
    defaults = yaml.safe_load((ROLES / "prometheus" / "defaults" / "main.yml").read_text())
    common = yaml.safe_load((ROLES / "bench_common" / "defaults" / "main.yml").read_text())
    # What the role's defaults resolve to for an inventory like inventory.example.yml's.
    values = {
        "bench_address": "10.0.1.11",
        "bench_metrics_port": common["bench_metrics_port"],
        "bench_admin_port": common["bench_admin_port"],
        "bench_broker_address": "10.0.1.10",  # bench_common's fact
    }
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    for key in ("bench_prometheus_scrape_interval", "bench_prometheus_harness_target"):
        values[key] = env.from_string(str(defaults[key])).render(values)
    values["bench_prometheus_broker_targets"] = [
        env.from_string(t).render(values) for t in defaults["bench_prometheus_broker_targets"]
    ]
    template = (ROLES / "prometheus" / "templates" / "prometheus.yml.j2").read_text()
    config = tmp_path / "prometheus.yml"
    config.write_text(env.from_string(template).render(values))
    done = subprocess.run(
        [PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    scraped = yaml.safe_load(config.read_text())["scrape_configs"]
    targets = {c["job_name"]: c["static_configs"][0]["targets"] for c in scraped}
    assert targets == {"fanout-bench": ["10.0.1.11:9464"], "broker": ["10.0.1.10:8080"]}
