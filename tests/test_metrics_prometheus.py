"""The agent's Prometheus endpoint (`agent run --metrics-listen`), its alert rules and dashboard.

A real agent (the real sampler over the fake NVML, on a virtual clock that moves only while the agent sleeps,
so each interval's averages are exact) serves its interval averages; a real Prometheus on 127.0.0.1 scrapes it
every second; promtool checks the exposition and the rules and runs the rules' unit tests. Waits are on the
agent's interval counter and on Prometheus' answers, never on wall-clock sleeps.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.agent_helpers import ManualClock, on_virtual_time
from tests.helpers import REPO, one_error_line, require_binary, run_cli, systemd_verify
from tests.prom_helpers import PromServer, start_prometheus

from gpuaudit.agent import metrics
from gpuaudit.agent.nvml import Nvml
from gpuaudit.agent.runner import Agent, AgentConfig
from gpuaudit.errors import GpuauditError
from gpuaudit.sim import fakenvml

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
AGENTS = REPO / "agents"
GIB = 1024 * fakenvml.MIB
TRAIN_UID = "3f2a9c1e-7b4d-4e8a-9c2f-1d5e6a7b8c90"  # train-0's pod UID (the agent reads it from the cgroup)


def _loads(t: float) -> list[fakenvml.Load]:
    """GPU 0: a pod training. GPU 1: held by bob's job, idle (phantom: busy duty cycle, ~no SM activity).
    GPU 2: nobody, idle. GPU 3: carol's job, busy."""
    P = fakenvml.ProcLoad
    return [
        fakenvml.Load(sm_active=0.6, sm_occupancy=0.3, tensor_active=0.4, dram_active=0.5, duty_cycle=0.95,
                      mem_used_bytes=40 * GIB, power_w=500.0,
                      processes=[P(pid=101, user="root", k8s_namespace="ml", k8s_pod="train-0", container="trainer",
                                   pod_uid=TRAIN_UID)]),
        fakenvml.Load(sm_active=0.01, duty_cycle=0.9, mem_used_bytes=20 * GIB, power_w=120.0,
                      processes=[P(pid=202, user="bob", job_id="4242")]),
        fakenvml.Load(),
        fakenvml.Load(sm_active=0.4, duty_cycle=0.8, mem_used_bytes=30 * GIB, power_w=400.0,
                      processes=[P(pid=303, user="carol", job_id="77"), P(pid=304, user="carol", job_id="77")]),
    ]


@dataclass
class Running:
    agent: Agent
    thread: threading.Thread

    @property
    def state(self) -> metrics.MetricsState:
        return self.agent.metrics

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.agent.metrics_server.port}/metrics"


def _start_agent(root: Path, names: str = "both", host: str = "node-a") -> Running:
    clock = ManualClock()
    fake = fakenvml.FakeNvml(fakenvml.profile("h100", 4), _loads, clock=clock, resolution_s=0.0625)
    config = AgentConfig(root=root, host=host, interval_s=0.25, flush_interval_s=1.0, fork_writer=False,
                         metrics_listen="127.0.0.1:0", metrics_names=names)
    agent = Agent(config, Nvml(fake), attributor=fake.attribution, mono=clock)
    on_virtual_time(agent, clock, real=True)  # paced for Prometheus, exact for the averages
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    running = Running(agent, thread)
    assert agent.metrics.wait_updates(2, timeout_s=60), "the agent published no interval"
    return running


def _stop(r: Running) -> None:
    r.agent.stop()
    r.thread.join(timeout=60)
    assert not r.thread.is_alive()


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    r = _start_agent(tmp_path_factory.mktemp("agent"))
    yield r
    _stop(r)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(resp.read().decode())


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


# --- the endpoint itself -----------------------------------------------------------------------------------
def _promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    promtool = require_binary("promtool", HOW)
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)


def test_exposition_passes_promtool_check_metrics(agent: Running) -> None:
    """28 (b): what the endpoint serves parses as Prometheus text exposition; promtool's only remarks are on
    dcgm-exporter's own camelCase labels (modelName, UUID, Hostname: kept so existing dashboards work).
    gpuaudit's names alone pass with no remark at all (test_names_gpuaudit_only_by_default)."""
    text = _scrape(agent.url)
    assert "gpuaudit_gpu_sm_active_ratio{" in text and "DCGM_FI_PROF_SM_ACTIVE{" in text
    r = _promtool_check_metrics(text)
    assert r.returncode in (0, 3), r.stdout + r.stderr  # 3: lint remarks, not a parse error
    remarks = set((r.stdout + r.stderr).strip().splitlines())
    assert remarks and all(re.fullmatch(r"DCGM_\w+ label names should be written in 'snake_case' not 'camelCase'", x)
                           for x in remarks), remarks


def test_interval_averages_labels_and_holders(agent: Running) -> None:
    """28 (a): the last interval's averages per GPU, the agent's counters, and a holders series only for
    what each GPU held (GPU 2 held nothing: no holder series)."""
    assert agent.state.wait_updates(8, timeout_s=60)  # past the first 1 s flush
    fam = _families(_scrape(agent.url))
    sm = {s.labels["gpu_index"]: s for s in fam["gpuaudit_gpu_sm_active_ratio"].samples}
    assert set(sm) == {"0", "1", "2", "3"}
    assert sm["0"].value == pytest.approx(0.6) and sm["1"].value == pytest.approx(0.01)
    assert set(sm["0"].labels) == set(metrics.GPU_LABELS) and sm["0"].labels["host"] == "node-a"
    power = {s.labels["gpu_index"]: s.value for s in fam["gpuaudit_gpu_power_watts"].samples}
    assert power["0"] == pytest.approx(500.0)  # the energy counter's delta over exactly one interval
    assert {s.labels["gpu_index"]: s.value for s in fam["gpuaudit_gpu_memory_used_bytes"].samples}["3"] == 30 * GIB
    holders = {(s.labels["gpu_index"], s.labels["user"], s.labels["job_id"], s.labels["k8s_pod"],
                s.labels["pod_uid"]): s.value for s in fam["gpuaudit_gpu_holder_processes"].samples}
    assert holders == {("0", "root", "", "train-0", TRAIN_UID): 1.0, ("1", "bob", "4242", "", ""): 1.0,
                       ("3", "carol", "77", "", ""): 2.0}
    assert set(next(iter(fam["gpuaudit_gpu_holder_processes"].samples)).labels) == set(metrics.HOLDER_LABELS)
    energy = [s.value for s in fam["gpuaudit_gpu_energy_joules"].samples if s.name.endswith("_total")]
    assert len(energy) == 4 and all(e > 0 for e in energy)
    counters = {s.name: s.value for f in fam.values() for s in f.samples if s.name.startswith("gpuaudit_agent_")}
    assert counters["gpuaudit_agent_intervals_total"] >= 2 and counters["gpuaudit_agent_samples_total"] >= 8
    assert counters["gpuaudit_agent_flushes_total"] >= 1 and counters["gpuaudit_agent_rows_written_total"] >= 4
    assert counters["gpuaudit_agent_cpu_seconds_total"] > 0 and counters["gpuaudit_agent_peak_rss_bytes"] > 1e6


def test_dcgm_names_units_and_labels(agent: Running) -> None:
    """28 (a): --metrics-names dcgm: dcgm-exporter's names, units (percent, MiB, mJ) and labels, the pod
    labels on the GPU a pod holds."""
    fam = _families(_scrape(agent.url))
    fb = {s.labels["gpu"]: s for s in fam["DCGM_FI_DEV_FB_USED"].samples}
    assert fb["3"].value == 30 * 1024
    assert set(fb["0"].labels) == set(metrics.DCGM_LABELS)
    assert (fb["0"].labels["pod"], fb["0"].labels["namespace"], fb["0"].labels["container"]) == \
        ("train-0", "ml", "trainer")
    # dcgm-exporter's label with --kubernetes-enable-pod-uid (internal/pkg/transformation/const.go uidAttribute)
    assert fb["0"].labels["pod_uid"] == TRAIN_UID and fb["1"].labels["pod_uid"] == ""
    assert fb["0"].labels["Hostname"] == "node-a" and fb["0"].labels["modelName"].startswith("NVIDIA H100")
    assert fb["1"].labels["pod"] == ""
    util = {s.labels["gpu"]: s.value for s in fam["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert util["0"] == pytest.approx(95)
    energy_mj = {s.labels["gpu"]: s.value for s in fam["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples}
    energy_j = {s.labels["gpu_index"]: s.value for s in fam["gpuaudit_gpu_energy_joules"].samples
                if s.name.endswith("_total")}
    assert energy_mj["0"] == pytest.approx(energy_j["0"] * 1000, rel=1e-9)


def test_names_gpuaudit_only_by_default(tmp_path: Path) -> None:
    """28 (a, b): names=gpuaudit has no dcgm name, and passes `promtool check metrics` with no remark."""
    r = _start_agent(tmp_path, names="gpuaudit")
    try:
        text = _scrape(r.url)
    finally:
        _stop(r)
    assert "gpuaudit_gpu_sm_active_ratio{" in text and "DCGM_" not in text
    check = _promtool_check_metrics(text)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr
    assert AgentConfig(root=tmp_path).metrics_names == "gpuaudit"


def test_scrape_makes_no_nvml_call(agent: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    """28 (a): a scrape renders the snapshot; it never reaches NVML."""
    calls: list[str] = []
    nv = agent.agent.nvml
    sampling = agent.thread.ident
    for name in ("_call",):  # the seam's one way into NVML
        orig = getattr(nv, name)

        def spy(fn: str, *a: Any, _orig: Any = orig, **k: Any) -> Any:
            if threading.get_ident() != sampling:
                calls.append(fn)
            return _orig(fn, *a, **k)

        monkeypatch.setattr(nv, name, spy)
    for _ in range(5):
        _scrape(agent.url)
    assert calls == []


def test_hostile_clients_never_stall_sampling(agent: Running) -> None:
    """28 (b): clients that connect and send nothing (more than the server serves at once), one that sends
    half a request line, one that asks and never reads: the agent keeps completing intervals meanwhile,
    idle clients are dropped after the request timeout, and a normal scrape works afterwards."""
    socks = []
    for _ in range(metrics.MAX_CONNECTIONS + 3):
        s = socket.create_connection(("127.0.0.1", agent.agent.metrics_server.port), timeout=30)
        socks.append(s)
    socks[0].sendall(b"GET /metr")
    socks[1].sendall(b"GET /metrics HTTP/1.0\r\n\r\n")  # never read
    try:
        before = agent.state.updates
        assert agent.state.wait_updates(before + 10, timeout_s=30), "sampling stalled behind idle scrapers"
        # Each idle connection is closed by the server (timeout, or at once when every slot is busy).
        for s in socks[2:]:
            assert s.recv(1) == b""
    finally:
        for s in socks:
            s.close()
    assert "gpuaudit_agent_intervals_total" in _scrape(agent.url)


def test_oversized_request_line_is_refused(agent: Running) -> None:
    """28 (a): a request line over http.server's 64 KiB cap gets 414, not an unbounded read."""
    with socket.create_connection(("127.0.0.1", agent.agent.metrics_server.port), timeout=30) as s:
        s.sendall(b"GET /" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.0 414")


def test_parse_listen() -> None:
    assert metrics.parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert metrics.parse_listen("[::1]:9400") == ("::1", 9400)
    assert metrics.parse_listen("localhost:0") == ("localhost", 0)
    assert metrics.parse_listen("0.0.0.0:9400", allow_remote=True) == ("0.0.0.0", 9400)
    for bad in ("9400", ":9400", "127.0.0.1:x", "127.0.0.1:70000", "10.0.0.5:9400", "node-a:9400"):
        with pytest.raises(GpuauditError):
            metrics.parse_listen(bad)


@pytest.mark.parametrize(("args", "needle"), [
    (["--metrics-listen", "0.0.0.0:9400"], "not a loopback address; add --metrics-allow-remote"),
    (["--metrics-listen", "10.1.2.3:9400"], "not a loopback address"),
    (["--metrics-listen", "9400"], "must be HOST:PORT"),
    (["--metrics-listen", "127.0.0.1:9400", "--metrics-names", "prom"], "--metrics-names must be one of"),
])
def test_cli_refuses_bad_listen_in_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    """28 (a): a non-loopback bind without --metrics-allow-remote (and a malformed one) is one line, exit 2."""
    r = run_cli("agent", "run", "--simulate", "static", "--simulate-gpus", "1", "--once", "--data", str(tmp_path),
                *args)
    one_error_line(r, needle)
    assert not any(tmp_path.iterdir())  # refused before anything was written


# --- a real Prometheus scraping the agent ----------------------------------------------------------------
@pytest.fixture(scope="module")
def prom(agent: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    prometheus = require_binary("prometheus", HOW)
    work = tmp_path_factory.mktemp("prom")
    port = agent.agent.metrics_server.port
    config = (f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
              f"rule_files:\n  - {AGENTS / 'gpuaudit-alerts.yml'}\n"
              f"scrape_configs:\n  - job_name: gpuaudit-agent\n    static_configs:\n"
              f"      - targets: ['127.0.0.1:{port}']\n")
    server = start_prometheus(prometheus, work / "tsdb", work, config_text=config)
    try:
        # Enough scrapes for rate() and increase(): wait on Prometheus' own count of them.
        _wait_for(server, 'count_over_time(up{job="gpuaudit-agent"}[1m]) >= 4', 90)
        yield server
    finally:
        server.stop()


def _query(server: PromServer, expr: str) -> list[dict[str, Any]]:
    url = f"{server.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _wait_for(server: PromServer, expr: str, timeout_s: float) -> list[dict[str, Any]]:
    """Ask until `expr` has a result (each query is itself a round trip: no sleep between)."""
    import time

    deadline = time.monotonic() + timeout_s
    ev = threading.Event()
    while time.monotonic() < deadline:
        res = _query(server, expr)
        if res:
            return res
        ev.wait(0.2)  # pace the polling of an external process; not a wait for a result
    raise AssertionError(f"{expr} returned nothing in {timeout_s}s; log: {server.log.read_text()[-2000:]}")


GRAFANA_VARS = {"$__interval_ms": "1000", "$__rate_interval": "1m", "$__interval": "1s", "$__range": "1h",
                '"$host"': '".*"'}


def _panel_exprs() -> list[tuple[str, str]]:
    dash = json.loads((AGENTS / "gpuaudit-dashboard.json").read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            for k, v in GRAFANA_VARS.items():
                expr = expr.replace(k, v)
            assert "$" not in expr, expr
            out.append((p["title"], expr))
    return out


def test_every_dashboard_panel_returns_data(prom: PromServer) -> None:
    """28 (d): every query of the Grafana dashboard, on gpuaudit's names and dcgm-exporter's, returns data
    from a real Prometheus scraping the agent."""
    exprs = _panel_exprs()
    assert len(exprs) >= 15
    empty = [(title, expr) for title, expr in exprs if not _query(prom, expr)]
    assert empty == []


def test_idle_held_gpu_hours_by_user(prom: PromServer) -> None:
    """28 (d): the idle-held panel counts bob (held, SM under 5 %) and not carol (held, busy)."""
    expr = dict(_panel_exprs())["Idle-held GPU-hours by user"]
    by_user = {r["metric"].get("user"): float(r["value"][1]) for r in _query(prom, expr)}
    assert by_user["bob"] > 0 and by_user["carol"] == 0 and by_user["root"] == 0


def test_prometheus_loads_the_alert_rules(prom: PromServer) -> None:
    url = f"{prom.url}/api/v1/rules"
    with urllib.request.urlopen(url, timeout=30) as r:
        groups = json.load(r)["data"]["groups"]
    assert sum(len(g["rules"]) for g in groups) == 10


# --- rules -------------------------------------------------------------------------------------------
def test_rules_check_and_unit_tests_pass() -> None:
    """28 (c): `promtool check rules` passes and the unit tests (agent and dcgm names) pass."""
    promtool = require_binary("promtool", HOW)
    check = subprocess.run([promtool, "check", "rules", str(AGENTS / "gpuaudit-alerts.yml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", str(AGENTS / "tests" / "gpuaudit-alerts-test.yml")],
                          capture_output=True, text=True, timeout=120)
    assert test.returncode == 0, test.stdout + test.stderr


def test_rule_unit_tests_catch_a_silent_rule(tmp_path: Path) -> None:
    """28 (c): the unit tests are not vacuous: with the idle threshold at 0 nothing fires and they fail."""
    promtool = require_binary("promtool", HOW)
    rules = (AGENTS / "gpuaudit-alerts.yml").read_text().replace("< 0.05", "< 0")
    (tmp_path / "gpuaudit-alerts.yml").write_text(rules)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.yml").write_text((AGENTS / "tests" / "gpuaudit-alerts-test.yml").read_text())
    r = subprocess.run([promtool, "test", "rules", str(tmp_path / "tests" / "t.yml")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "GpuHeldButIdle" in r.stdout + r.stderr and "DcgmGpuHeldButIdle" in r.stdout + r.stderr


def test_prometheusrule_holds_the_same_rules() -> None:
    """28 (c): the PrometheusRule for the Operator carries exactly the rules file's groups."""
    plain = yaml.safe_load((AGENTS / "gpuaudit-alerts.yml").read_text())
    crd = yaml.safe_load((AGENTS / "gpuaudit-prometheusrule.yaml").read_text())
    assert crd["kind"] == "PrometheusRule" and crd["apiVersion"] == "monitoring.coreos.com/v1"
    assert crd["spec"]["groups"] == plain["groups"]


def test_documented_metric_names_match_the_endpoint() -> None:
    """28 (a): every metric the endpoint can emit is documented in agents/README.md."""
    doc = (AGENTS / "README.md").read_text()
    names = [n for n, *_ in metrics.GPU_GAUGES] + [n for n, *_ in metrics.DCGM_GAUGES] + [
        "gpuaudit_gpu_energy_joules_total", "gpuaudit_gpu_holder_processes", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gpuaudit_agent_intervals_total", "gpuaudit_agent_cpu_seconds_total", "gpuaudit_agent_peak_rss_bytes"]
    missing = [n for n in names if not re.search(rf"`{n}`", doc)]
    assert missing == []


# --- deployment ----------------------------------------------------------------------------------------
def test_metrics_variant_in_agents_readme_is_a_valid_daemonset_the_agent_accepts() -> None:
    """28 (e): the README's metrics variant applied to the DaemonSet validates, every flag exists, and the
    ServiceMonitor's Service selects the agent's pods on the `metrics` port."""
    from tests.test_deploy import _docs

    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    block = re.search(r"```yaml\n(# metrics variant.*?)```", (AGENTS / "README.md").read_text(), re.S)
    assert block, "agents/README.md lost its metrics variant"
    patch = yaml.safe_load(block.group(1))
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    container.update(patch)
    kv.validate(ds, kv.latest_version(), strict=True)
    args = patch["args"]
    assert args[args.index("--metrics-listen") + 1] == "$(POD_IP):9400" and "--metrics-allow-remote" in args
    r = run_cli("agent", "run", "--help")
    assert {a for a in args if a.startswith("--")} <= set(re.findall(r"--[a-z-]+", r.stdout))
    svc, monitor = yaml.safe_load_all((AGENTS / "servicemonitor.yaml").read_text())
    kv.validate(svc, kv.latest_version(), strict=True)
    assert svc["metadata"]["name"] == "gpuaudit-agent"  # the scrape job name the rules expect
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] == patch["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
    assert monitor["kind"] == "ServiceMonitor"


def test_systemd_metrics_drop_in_verifies(tmp_path: Path) -> None:
    """28 (e): the unit with the metrics drop-in applied still passes `systemd-analyze verify`, and its
    ExecStart listens on loopback with flags `agent run` has."""
    from tests.test_deploy import UNIT

    drop_in = (AGENTS / "gpuaudit-agent-metrics.conf").read_text()
    r = systemd_verify({UNIT.name: UNIT.read_text() + "\n" + drop_in}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gpuaudit-agent.service" not in r.stderr, r.stderr
    exec_start = next(ln for ln in drop_in.splitlines() if ln.startswith("ExecStart=/"))
    host, _port = metrics.parse_listen(exec_start.split("--metrics-listen ")[1].split()[0])
    assert host == "127.0.0.1"


def test_cli_port_in_use_is_one_line(tmp_path: Path) -> None:
    """28 (a): a port another process holds is one line, exit 2, and the agent lock is released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_cli("agent", "run", "--simulate", "static", "--simulate-gpus", "1", "--once", "--data",
                    str(tmp_path), "--metrics-listen", f"127.0.0.1:{port}")
    one_error_line(r, f"--metrics-listen 127.0.0.1:{port}: cannot listen")
    r = run_cli("agent", "run", "--simulate", "static", "--simulate-gpus", "1", "--once", "--interval", "0.2",
                "--data", str(tmp_path))  # one 0.2 s interval, not the default 10 s: the lock is what is tested
    assert r.returncode == 0, r.stderr
