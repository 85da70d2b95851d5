"""Report test helpers: a real headless Chromium driven over the DevTools protocol (websocket-client),
and small fixed datasets written through the real store."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import REPO, require_binary, wait_until

ARTIFACTS = REPO / "test-artifacts"

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
)


def require_websocket_client() -> None:
    """The DevTools client (dev dependency `websocket-client`): skip without it on a laptop, fail in CI."""
    try:
        import websocket  # noqa: F401
    except ImportError:
        import pytest

        from helpers import in_ci

        message = "websocket-client not installed; pip install -e '.[dev]'"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    return require_binary("chromium", "install it with `apt-get install -y chromium` (Debian)")


@dataclass
class PageVisit:
    """What happened when Chromium opened one file."""

    url: str
    text: str  # document.body.innerText
    title: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, the file included
    screenshot: Path | None = None
    probes: dict[str, Any] = field(default_factory=dict)

    @property
    def external_requests(self) -> list[str]:
        return [u for u in self.requests if u != self.url]


class _Cdp:
    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        for ev in self.events:
            if ev["method"] == method:
                return ev
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg
        raise TimeoutError(method)

    def close(self) -> None:
        self.ws.close()


def open_in_chromium(path: Path, screenshot: Path | None = None, *, dark: bool = False,
                     probes: dict[str, str] | None = None, width: int = 1100, pdf: Path | None = None,
                     media: str = "") -> PageVisit:
    """Open `path` in a fresh headless Chromium; record console errors, exceptions and every network
    request; return the rendered text, optional JS probe results and a full-page screenshot."""
    require_websocket_client()
    binary = chromium_binary()
    profile = Path(tempfile.mkdtemp(prefix="gpuaudit-chromium-"))
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--window-size={width},900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        if not wait_until(lambda: proc.poll() is not None or (port_file.exists() and port_file.read_text().strip())) \
                or proc.poll() is not None:
            raise RuntimeError("chromium did not start its DevTools endpoint")
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        cdp = _Cdp(page["webSocketDebuggerUrl"])
        try:
            return _visit(cdp, path, screenshot, dark, probes or {}, width, pdf, media)
        finally:
            cdp.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _visit(cdp: _Cdp, path: Path, screenshot: Path | None, dark: bool, probes: dict[str, str],
           width: int, pdf: Path | None = None, media: str = "") -> PageVisit:
    for domain in ("Page", "Runtime", "Log", "Network"):
        cdp.call(f"{domain}.enable")
    cdp.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
    cdp.call("Emulation.setEmulatedMedia", media=media,  # "print": lay the page out as it prints
             features=[{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}])
    url = path.resolve().as_uri()
    cdp.events.clear()
    cdp.call("Page.navigate", url=url)
    cdp.wait_event("Page.loadEventFired", 60)
    # A barrier, not a pause: once the page has run a frame and its queued tasks, the console messages they
    # made were sent before this call's answer (CDP keeps order), and cdp.call collected them.
    cdp.call("Runtime.evaluate", awaitPromise=True,
             expression="new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))")

    def evaluate(expr: str) -> Any:
        res = cdp.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return res["result"].get("value")

    visit = PageVisit(url=url, text=evaluate("document.body.innerText"), title=evaluate("document.title"))
    visit.probes = {name: evaluate(expr) for name, expr in probes.items()}
    if screenshot is not None:
        metrics = cdp.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                        clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        visit.screenshot = screenshot
    if pdf is not None:  # print it as a reader would (A4, print stylesheet)
        printed = cdp.call("Page.printToPDF", paperWidth=8.27, paperHeight=11.69, printBackground=True)
        pdf.parent.mkdir(parents=True, exist_ok=True)
        pdf.write_bytes(base64.b64decode(printed["data"]))
    cdp.call("Runtime.evaluate", expression="0")  # flush pending events
    for ev in cdp.events:
        m, p = ev["method"], ev["params"]
        if m == "Network.requestWillBeSent":
            visit.requests.append(p["request"]["url"])
        elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
            visit.console_errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            visit.console_errors.append(p["exceptionDetails"].get("text", "exception"))
        elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            visit.console_errors.append(p["entry"]["text"])
    return visit


def artifact(name: str) -> Path:
    """A path under test-artifacts/ (gitignored; CI keeps it)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def env_without_ci() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "CI"}


# -- small fixed datasets, written through the real store ---------------------------------------------------

# Untrusted names with markup and quotes, one per field the report shows. Each carries a marker word so a
# test can find its literal text in the rendered page.
EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
HOSTILE_NAMES = {
    "host": "evilhost" + EVIL + "'q\"",
    "user": "eviluser" + EVIL + "&amp;",
    "job_id": "eviljob" + EVIL + "|*_[x](y)",
    "k8s_namespace": "evilns" + EVIL,
    "k8s_pod": "evilpod" + EVIL + "`tick`",
    "container": "evilctr" + EVIL,
    "command": "evilcmd" + EVIL,
    "gpu_uuid": "GPU-evil" + EVIL,
}


def write_fixed_dataset(root: Path, *, days: int = 14, interval_s: int = 900, hostile: bool = False,
                        start: str = "2026-01-05T00:00:00+00:00", duty_cycle_only: bool = False) -> None:
    """A small, fully deterministic fleet: 2 hosts × 2 GPUs with distinct habits.

    gpu 0 (host A): alice, weekday office hours, SM 60 %      gpu 1 (host A): bob holds it always, mostly idle
    gpu 2 (host B): carol trains at night, SM 90 %             gpu 3 (host B): never used
    With hostile=True the names in every untrusted field carry markup (HOSTILE_NAMES). With duty_cycle_only
    the fleet reports like plain NVML without GPM: no sm_active, source "nvml"."""
    import datetime as dt

    import polars as pl

    from gpuaudit import schema
    from gpuaudit.store import write_table

    t0 = dt.datetime.fromisoformat(start)
    host_a = HOSTILE_NAMES["host"] if hostile else "gpu-node-001"
    host_b = "gpu-node-002"
    gpus = [
        (host_a, "GPU-0000aaaa-0000-0000-0000-000000000000", 0),
        (host_a, "GPU-1111bbbb-0000-0000-0000-000000000000", 1),
        (host_b, "GPU-2222cccc-0000-0000-0000-000000000000", 0),
        (host_b, HOSTILE_NAMES["gpu_uuid"] if hostile else "GPU-3333dddd-0000-0000-0000-000000000000", 1),
    ]
    users = ["alice", HOSTILE_NAMES["user"] if hostile else "bob", "carol"]
    jobs = ["1001", HOSTILE_NAMES["job_id"] if hostile else "1002", "1003"]
    samples: dict[str, list] = {c: [] for c in ("ts", "interval_s", "host", "gpu_uuid", "gpu_index", "gpu_name",
                                                "gpu_fraction", "sm_active", "sm_occupancy", "tensor_active",
                                                "dram_active", "duty_cycle", "mem_util", "mem_used_bytes",
                                                "mem_total_bytes", "power_w", "energy_j", "temp_c",
                                                "n_processes", "source")}
    procs: dict[str, list] = {c: [] for c in ("ts", "host", "gpu_uuid", "pid", "user", "job_id", "k8s_namespace",
                                              "k8s_pod", "container", "command", "mem_used_bytes", "sm_util")}
    steps = days * 86400 // interval_s
    for k in range(1, steps + 1):
        ts = t0 + dt.timedelta(seconds=k * interval_s)
        mid = ts - dt.timedelta(seconds=interval_s / 2)
        hour, weekday = mid.hour, mid.weekday()
        for g, (host, uuid, index) in enumerate(gpus):
            held, sm = False, 0.0
            if g == 0 and weekday < 5 and 9 <= hour < 18:
                held, sm = True, 0.6
            elif g == 1:
                held, sm = True, (0.3 if 10 <= hour < 12 else 0.0)
            elif g == 2 and (hour >= 20 or hour < 6):
                held, sm = True, 0.9
            duty = min(1.0, round(sm * 1.5, 2)) if held else 0.0
            power = 80.0 + 600.0 * sm
            mem = (40 << 30) if held else (1 << 29)
            samples["ts"].append(ts)
            samples["interval_s"].append(float(interval_s))
            samples["host"].append(host)
            samples["gpu_uuid"].append(uuid)
            samples["gpu_index"].append(index)
            samples["gpu_name"].append("NVIDIA H100 80GB HBM3")
            samples["gpu_fraction"].append(1.0)
            samples["sm_active"].append(None if duty_cycle_only else sm)
            samples["sm_occupancy"].append(round(sm * 0.5, 3))
            samples["tensor_active"].append(round(sm * 0.4, 3))
            samples["dram_active"].append(round(sm * 0.3, 3))
            samples["duty_cycle"].append(duty)
            samples["mem_util"].append(round(sm * 0.5, 2))
            samples["mem_used_bytes"].append(mem)
            samples["mem_total_bytes"].append(80 << 30)
            samples["power_w"].append(power)
            samples["energy_j"].append(power * interval_s)
            samples["temp_c"].append(int(35 + 40 * sm))
            samples["n_processes"].append(1 if held else 0)
            samples["source"].append(schema.SOURCE_NVML if duty_cycle_only else schema.SOURCE_SIMULATED)
            if held:
                procs["ts"].append(ts)
                procs["host"].append(host)
                procs["gpu_uuid"].append(uuid)
                procs["pid"].append(1000 + g)
                procs["user"].append(users[g])
                procs["job_id"].append(jobs[g])
                procs["k8s_namespace"].append(HOSTILE_NAMES["k8s_namespace"] if hostile and g == 1 else "research")
                procs["k8s_pod"].append(HOSTILE_NAMES["k8s_pod"] if hostile and g == 1 else f"train-{g}")
                procs["container"].append(HOSTILE_NAMES["container"] if hostile and g == 1 else "main")
                procs["command"].append(HOSTILE_NAMES["command"] if hostile and g == 1 else "python train.py")
                procs["mem_used_bytes"].append(mem)
                procs["sm_util"].append(sm)
    write_table(root, schema.SAMPLES, pl.DataFrame(samples))
    write_table(root, schema.PROCESSES, pl.DataFrame(procs))


def simulate_small(root: Path, scenario: str, *, gpus: int = 16, days: float = 4, interval_s: float = 900,
                   seed: int = 3) -> None:
    """A small simulated trial (seconds to write), through the real simulator and store."""
    from gpuaudit.sim.bulk import simulate

    simulate(root, scenario, gpus=gpus, days=days, interval_s=interval_s, seed=seed)


def normalize_generated(text: str) -> str:
    """Golden files must not change with the clock or the version: mask the generation stamp."""
    import re

    text = re.sub(r"at \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", "at <generated>", text)
    return re.sub(r"gpuaudit \d+\.\d+\.\d+\S*", "gpuaudit <version>", text)


def count_figures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each chart figure made in this process from now on (charts._figure, one per drawing)."""
    from gpuaudit.report import charts

    made: list[str] = []
    figure = charts._figure

    def counted(height_in, name, narrow_height_in=None):  # type: ignore[no-untyped-def]
        made.append(name)
        return figure(height_in, name, narrow_height_in)

    monkeypatch.setattr(charts, "_figure", counted)
    return made
