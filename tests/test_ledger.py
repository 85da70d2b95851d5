"""The four-state ledger: scheduler allocations mapped onto observed GPU-hours (analysis/ledger.py).

A hand-made node of 4 GPUs over 8 hours whose states are known by construction:
- job 501 (Slurm) allocated 2 GPUs from 1 h to 5 h; its one process ran on g0 from 1 h to 3 h at SM 0.5;
- job 502 allocated 1 GPU from 4 h to 8 h; its process held g2 from 4 h to 8 h with the SMs idle;
- g3 ran a process of job 999, never allocated, from 6 h to 7 h at SM 1.0.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import polars as pl
import pytest
from tests.analysis_helpers import T0, ends, gpu_rows, proc_rows, rollups, write

from gpuaudit import schema, store
from gpuaudit.analysis.ledger import STATES, ledger
from gpuaudit.analysis.pipeline import analyze
from gpuaudit.importer.allocations import frame, write_allocations

N = 8 * 60  # 8 h of 60 s samples
HOUR = 60


def _alloc(job: str, host: str, gpus: float, h0: float, h1: float, **kw: object) -> dict:
    return {"job_id": job, "job_id_raw": job, "user": kw.get("user", "alice"), "account": kw.get("account", "phys"),
            "partition": "gpu", "namespace": None, "host": host, "gpus": gpus, "gpu_type": None, "mig_profile": None,
            "start_ts": T0 + dt.timedelta(hours=h0), "end_ts": T0 + dt.timedelta(hours=h1),
            "state": "COMPLETED", "source": "slurm"}


def _node() -> tuple[list[dict], list[dict]]:
    def window(a: float, b: float):  # sample i lies in [a h, b h)
        return lambda i: a * HOUR <= i < b * HOUR

    g0 = gpu_rows("n1", "g0", N, sm=lambda i: 0.5 if window(1, 3)(i) else 0.0, procs=lambda i: int(window(1, 3)(i)))
    g1 = gpu_rows("n1", "g1", N)
    g2 = gpu_rows("n1", "g2", N, procs=lambda i: int(window(4, 8)(i)))
    g3 = gpu_rows("n1", "g3", N, sm=lambda i: 1.0 if window(6, 7)(i) else 0.0, procs=lambda i: int(window(6, 7)(i)))
    procs = (proc_rows("n1", "g0", ends(g0, window(1, 3)), job_id="501")
             + proc_rows("n1", "g2", ends(g2, window(4, 8)), job_id="502", user="bob")
             + proc_rows("n1", "g3", ends(g3, window(6, 7)), job_id="999", user="carol"))
    return g0 + g1 + g2 + g3, procs


ALLOCS = [_alloc("501", "n1", 2, 1, 5), _alloc("502", "n1", 1, 4, 8, user="bob")]


def _ledger(allocs: list[dict] | None):
    samples, procs = _node()
    roll = rollups(samples, procs, allocs)
    start, end = T0.timestamp(), (T0 + dt.timedelta(hours=8)).timestamp()
    return ledger(roll.gpu_hours, roll.holders, roll.allocations, start, end, False)


def test_four_states_are_known_and_sum_to_w() -> None:
    led, m = _ledger(ALLOCS)
    v = {s: getattr(led, s).value for s in STATES}
    assert led.basis == "allocations"
    assert v == pytest.approx({"productive": 2.0, "held_idle": 5.0, "allocated_no_process": 6.0,
                               "unallocated": 19.0}, abs=1e-6)
    assert sum(v.values()) == pytest.approx(led.observed_gpu_hours.value) == pytest.approx(32.0)
    assert led.allocated_gpu_hours.value == pytest.approx(12.0)
    assert led.scheduler_gpu_hours.value == pytest.approx(12.0)
    assert led.held_outside_allocation_gpu_hours.value == pytest.approx(1.0)
    assert led.unmapped_gpu_hours.value == pytest.approx(0.0)
    # Every GPU-hour partitions its own observed time.
    g = m.gpu_hours.with_columns(pl.sum_horizontal(*(f"{s}_s" for s in STATES)).alias("sum_s"))
    assert (g["sum_s"] - g["observed_s"]).abs().max() < 1e-6
    assert g.select(pl.min_horizontal(*(f"{s}_s" for s in STATES)).min()).item() >= -1e-9
    weeks = led.per_week.rows
    assert sum(r["allocated_no_process"] for r in weeks) == pytest.approx(6.0)


def test_job_gpus_go_to_its_process_first() -> None:
    """502 held g2: its allocation lands there (matched), not spread over idle GPUs."""
    _, m = _ledger(ALLOCS)
    g2 = m.gpu_hours.filter((pl.col("gpu_uuid") == "g2") & (pl.col("hour_s") >= T0.timestamp() + 5 * 3600))
    assert g2["allocated_s"].sum() == pytest.approx(3 * 3600)
    g0 = m.gpu_hours.filter((pl.col("gpu_uuid") == "g0") & (pl.col("hour_s") < T0.timestamp() + 3 * 3600))
    assert g0["allocated_s"].sum() == pytest.approx(2 * 3600)


def test_without_allocations_believed_is_held_and_nothing_changes() -> None:
    led, _ = _ledger(None)
    assert led.basis == "processes"
    assert led.allocated_no_process.value == 0
    assert led.allocated_gpu_hours.value == pytest.approx(2 + 4 + 1)  # held hours
    assert "inferred from the processes" in led.notes[0]
    v = {s: getattr(led, s).value for s in STATES}
    assert sum(v.values()) == pytest.approx(32.0)


def test_unknown_host_and_overflow_are_unmapped() -> None:
    led, _ = _ledger([*ALLOCS, _alloc("600", "ghost", 4, 0, 2), _alloc("601", "n1", 8, 0, 1)])
    assert led.hosts_without_telemetry == ("ghost",)
    assert led.unmapped_gpu_hours.value == pytest.approx(8 + 4)  # ghost's 8, and 8 GPUs on 4 in hour 0
    assert led.scheduler_gpu_hours.value == pytest.approx(12 + 8 + 8)


def test_analyze_puts_the_ledger_in_json_and_bills_allocated_hours(tmp_path: Path) -> None:
    """analyze --json has `ledger` and believed = allocated utilization where allocations were imported; with
    allocations the cost model's billed-hour basis is held, and where allocations are imported, allocated or
    active (W − unallocated)."""
    samples, procs = _node()
    write(tmp_path / "plain", samples, procs)
    write(tmp_path / "alloc", samples, procs)
    write_allocations(tmp_path / "alloc", frame(ALLOCS), "slurm")
    plain, alloc = analyze(tmp_path / "plain"), analyze(tmp_path / "alloc")
    d = alloc.to_dict()
    assert d["ledger"]["allocated_no_process"]["value"] == pytest.approx(6.0)
    assert d["utilization"]["believed_utilization"]["value"] == pytest.approx(12 / 32)
    assert plain.to_dict()["utilization"]["believed_utilization"]["value"] == pytest.approx(7 / 32)
    assert plain.to_dict()["ledger"]["basis"] == "processes"
    # held: 7 GPU-h; billed max(held, allocated) by hour: 0+2+2+2+3+1+2+1 = 13 GPU-h of W = 32.
    assert plain.break_even.measured_billed == pytest.approx(7 / 32, rel=1e-6)
    assert alloc.break_even.measured_billed == pytest.approx(13 / 32, rel=1e-6)
    assert plain.utilization.real_utilization.value == alloc.utilization.real_utilization.value


def test_allocations_view_rejects_end_before_start(tmp_path: Path) -> None:
    """A foreign file with an allocation that ends before it starts is left out by the view's rules."""
    bad = frame([_alloc("7", "n1", 1, 2, 3)]).with_columns(end_ts=pl.col("start_ts") - dt.timedelta(hours=1))
    store.write_table(tmp_path, schema.ALLOCATIONS, bad.with_columns(pl.col("end_ts")), name="foreign")
    with store.open_dataset(tmp_path) as ds:
        assert ds.fetchall("SELECT count(*) FROM allocations")[0][0] == 0
        assert [r[1] for r in ds.rejected_rows()] == ["end_ts before start_ts"]


def _charge(allocs, samples=None, procs=None):  # type: ignore[no-untyped-def]
    from gpuaudit.analysis import utilization as ut
    from gpuaudit.analysis.chargeback import chargeback, unheld_real_s

    if samples is None:
        samples, procs = _node()
    roll = rollups(samples, procs, allocs)
    t = ut.totals(roll)
    start, end = T0.timestamp(), (T0 + dt.timedelta(hours=8)).timestamp()
    return chargeback(ut.holder_hours(roll), roll.allocations, start, end, 2.0, unheld_real_s(roll.gpu_hours)), t


def test_chargeback_rows_sum_to_fleet_totals() -> None:
    charge, t = _charge(ALLOCS)
    for by in ("account", "user", "partition", "namespace"):
        rows = charge.by(by).rows
        assert sum(r["allocated_gpu_hours"] for r in rows) == pytest.approx(12.0), by
        assert sum(r["held_gpu_hours"] for r in rows) == pytest.approx(t.r), by
        assert sum(r["real_gpu_hours"] for r in rows) == pytest.approx(t.s), by
    acct = {r["account"]: r for r in charge.by_account.rows}
    assert acct["phys"]["allocated_gpu_hours"] == pytest.approx(12.0)
    assert acct["phys"]["held_gpu_hours"] == pytest.approx(6.0)
    assert acct["phys"]["unused_gpu_hours"] == pytest.approx(11.0)
    assert acct["phys"]["unused_usd"] == pytest.approx(22.0)
    assert acct["(no allocation)"]["held_gpu_hours"] == pytest.approx(1.0)
    assert charge.by_account.rows[0]["account"] == "phys"  # ranked by idle cost
    users = {r["user"]: r for r in charge.by_user.rows}
    assert users["bob"]["allocated_gpu_hours"] == pytest.approx(4.0)
    assert users["carol"]["allocated_gpu_hours"] == 0


def test_idle_jobs_zero_util_allocated_unused_and_idle_after_active() -> None:
    g0 = gpu_rows("n1", "g0", N, sm=lambda i: 0.6 if i < HOUR else 0.0, procs=lambda i: int(i < 4 * HOUR))
    g1 = gpu_rows("n1", "g1", N)
    procs = proc_rows("n1", "g0", ends(g0, lambda i: i < 4 * HOUR), job_id="700")
    allocs = [_alloc("700", "n1", 1, 0, 4), _alloc("701", "n1", 1, 2, 4), _alloc("702", "n1", 1, 4, 4.5)]
    charge, _ = _charge(allocs, g0 + g1, procs)
    listed = {r["job"]: r for r in charge.idle_jobs.rows}
    assert listed.keys() == {"700", "701"}  # 702: half an hour only
    assert listed["700"]["reason"] == "idle after an active stretch"
    assert listed["700"]["idle_gpu_hours"] == pytest.approx(3.0)
    assert listed["700"]["active_hours"] == 1
    assert listed["701"]["reason"] == "allocated, no process"
    assert listed["701"]["idle_gpu_hours"] == pytest.approx(2.0)


def test_idle_after_an_active_stretch_needs_a_whole_idle_hour() -> None:
    """Issue 26.8: a job active for an hour that then held its GPU idle for 15 minutes into the next clock hour
    was listed "idle after an active stretch" (0.25 GPU-h): it counted clock hours touched, not idle wall time.
    The documented threshold is at least one idle hour (MIN_IDLE_HOURS) of wall time."""
    from gpuaudit.analysis.chargeback import MIN_IDLE_HOURS

    def job(gpu: str, held_min: int, job_id: str) -> tuple[list, list]:  # type: ignore[type-arg]
        g = gpu_rows("n1", gpu, N, sm=lambda i: 0.6 if i < HOUR else 0.0, procs=lambda i: int(i < held_min))
        return g, proc_rows("n1", gpu, ends(g, lambda i: i < held_min), job_id=job_id)

    short, short_p = job("g0", HOUR + HOUR // 4, "800")  # idle 15 min after the active hour
    long_, long_p = job("g1", 2 * HOUR + HOUR // 4, "801")  # idle 75 min
    charge, _ = _charge([], short + long_, short_p + long_p)
    listed = {r["job"]: r for r in charge.idle_jobs.rows}
    assert listed.keys() == {"801"}
    assert listed["801"]["reason"] == "idle after an active stretch"
    assert listed["801"]["idle_gpu_hours"] == pytest.approx(1.25)
    assert all(r["idle_gpu_hours"] >= MIN_IDLE_HOURS - 1e-9 for r in charge.idle_jobs.rows)


def test_cli_idle_jobs_are_idle_for_an_hour_or_more(tmp_path: Path) -> None:
    """Issue 26.8 through the CLI: `report --by user` on a simulated fleet whose idle-jobs.csv listed a job
    idle 0.53 GPU-h "after an active stretch"; every row idles at least one GPU-hour (an hour of wall time on
    at least one GPU)."""
    import csv

    from tests.helpers import run_cli

    root = tmp_path / "d"
    r = run_cli("simulate", "--gpus", "16", "--days", "3", "--interval", "60", "--seed", "0", "--start",
                "2026-11-03", "--data", str(root))
    assert r.returncode == 0, r.stderr
    r = run_cli("report", "--data", str(root), "--out", str(tmp_path / "out"), "-f", "json", "--by", "user",
                "--quiet")
    assert r.returncode == 0, r.stderr
    with (tmp_path / "out" / "idle-jobs.csv").open() as f:
        rows = list(csv.DictReader(f))
    short = [x for x in rows if float(x["idle_gpu_hours"]) < 0.99]
    assert short == []


def test_cli_report_by_writes_chargeback_csv_and_json(tmp_path: Path) -> None:
    import csv
    import json

    from tests.helpers import one_error_line, run_cli

    samples, procs = _node()
    root = write(tmp_path / "d", samples, procs)
    rows = [{**a, "account": "=cmd|x" if a["job_id"] == "502" else a["account"]} for a in ALLOCS]
    write_allocations(root, frame(rows), "slurm")
    r = run_cli("report", "--data", str(root), "--out", str(tmp_path / "out"), "-f", "json", "--by",
                "account,namespace", "--quiet")
    assert r.returncode == 0, r.stderr
    with (tmp_path / "out" / "chargeback-account.csv").open() as f:
        table = list(csv.DictReader(f))
    assert sum(float(x["allocated_gpu_hours"]) for x in table) == pytest.approx(12.0)
    assert sum(float(x["held_gpu_hours"]) for x in table) == pytest.approx(7.0)
    assert sum(float(x["real_gpu_hours"]) for x in table) == pytest.approx(2.0)
    assert "'=cmd|x" in {x["account"] for x in table}  # a formula from the data is defused
    doc = json.loads((tmp_path / "out" / "chargeback-namespace.json").read_text())
    assert doc["basis"] == "allocations" and doc["usd_per_gpu_hour"] > 0
    idle = json.loads((tmp_path / "out" / "idle-jobs.json").read_text())
    assert {row["job"]: row["reason"] for row in idle["rows"]}["502"] == "0 % SM activity while held"
    r = run_cli("report", "--data", str(root), "--out", str(tmp_path / "out2"), "--by", "team")
    assert "unknown --by 'team'" in one_error_line(r)
    assert not (tmp_path / "out2").exists()


def test_report_first_section_shows_allocated_held_real_and_the_ledger(tmp_path: Path) -> None:
    from gpuaudit.report.writer import write_report

    samples, procs = _node()
    write(tmp_path / "plain", samples, procs)
    write(tmp_path / "alloc", samples, procs)
    write_allocations(tmp_path / "alloc", frame(ALLOCS), "slurm")
    md = {}
    for name in ("plain", "alloc"):
        written = write_report(analyze(tmp_path / name), tmp_path / f"out-{name}", ["md"])
        text = written.files["md"].read_text()
        md[name] = text[text.index("## 1. "):text.index("## 2. ")]
        assert (tmp_path / f"out-{name}" / "charts" / "ledger.svg").read_text().startswith("<?xml")
    assert "Believed: allocated (scheduler) utilization A/W | 37.5 %" in md["alloc"]
    assert "The scheduler shows the fleet 37.5 % allocated" in md["alloc"]
    assert "| allocated, no process | 6.0 GPU-h | 18.8 %" in md["alloc"]
    assert "believed is inferred from processes" in md["plain"]
    assert "allocated (scheduler)" not in md["plain"]


def test_mig_allocation_counts_its_share_of_a_gpu() -> None:
    """A Slurm job allocated a 3g.40gb slice (3/7 of a GPU) for 2 h ran its process on that slice for 1 h:
    1 h × 3/7 allocated with no process; the other slice (4/7) stays unallocated."""
    n = 3 * HOUR
    s1 = gpu_rows("n1", "g0", n, mig_instance=1, gpu_fraction=3 / 7, sm=lambda i: 0.5 if i < HOUR else 0.0,
                  procs=lambda i: int(i < HOUR))
    s2 = gpu_rows("n1", "g0", n, mig_instance=2, gpu_fraction=4 / 7)
    procs = proc_rows("n1", "g0", ends(s1, lambda i: i < HOUR), job_id="800", mig_instance=1)
    alloc = [{**_alloc("800", "n1", 3 / 7, 0, 2), "mig_profile": "3g.40gb"}]
    roll = rollups(s1 + s2, procs, alloc)
    led, m = ledger(roll.gpu_hours, roll.holders, roll.allocations, T0.timestamp(),
                    (T0 + dt.timedelta(hours=3)).timestamp(), False)
    assert led.observed_gpu_hours.value == pytest.approx(3.0)
    assert led.allocated_no_process.value == pytest.approx(3 / 7)
    assert led.productive.value == pytest.approx(0.5 * 3 / 7)
    assert led.held_idle.value == pytest.approx(0.5 * 3 / 7)
    assert led.scheduler_gpu_hours.value == pytest.approx(2 * 3 / 7)
    slice2 = m.gpu_hours.filter(pl.col("mig_instance") == 2)
    assert slice2["allocated_s"].sum() == pytest.approx(0.0, abs=1e-6)


def test_a_bucket_the_trial_only_partly_covers_bills_only_its_observed_allocation(tmp_path: Path) -> None:
    """The demo read "demand peaked at 140 GPUs" on a 64-GPU fleet, and all on-prem bought 140: the trial's first
    300 s bucket held 60 s of samples (a fifth of the GPUs reporting, time-weighted) but the whole bucket's
    allocations, scaled × fleet ÷ reporting. Allocations count only inside the trial, and the billed demand never
    exceeds the GPUs that reported."""
    start = T0 + dt.timedelta(seconds=240)  # the first sample ends 60 s before the first 300 s bucket does
    samples = [r for g in range(4) for r in gpu_rows("n1", f"p{g}", 4 * 60, start=start, procs=0)]
    allocs = [_alloc("700", "n1", 4, 0, 6)]  # all 4 GPUs allocated from before the trial to after it
    write(tmp_path, samples)
    write_allocations(tmp_path, frame(allocs), "slurm")
    r = analyze(tmp_path)
    assert r.hybrid.peak_demand.value == pytest.approx(4.0, abs=1e-6)  # it was 4 ÷ (60/300) = 20
    by_id = {s.id: s for s in r.costs.scenarios}
    assert by_id["all-on-prem"].owned_gpus == 4


def test_with_allocations_believed_and_the_phantom_dollars_are_one_quantity_each(tmp_path: Path) -> None:
    """With scheduler allocations the headline tile called R/W "believed" while section 1 called the allocated
    share believed, and the phantom gap in dollars priced the billed hours (allocated ∪ held, 13 GPU-h) while its
    fold printed R − S (here 6 GPU-h). One believed (allocated, shown the same in the verdict and section 1), and
    the dollars are the printed hours × the printed price."""
    from gpuaudit.report.sections import build_report

    samples, procs = _node()
    write(tmp_path, samples, procs)
    write_allocations(tmp_path, frame(ALLOCS), "slurm")
    r = analyze(tmp_path)
    gap = r.utilization.phantom_gpu_hours.value or 0.0
    assert r.costs.phantom_usd.value == pytest.approx(gap * (r.costs.cloud_flexible_usd_per_gpu_hour.value or 0))
    report = build_report(r, version="t")
    believed = [f for f in report.verdict.figures if f.label.startswith("Believed")]
    section1 = [f for f in report.sections[0].figures if f.label.startswith("Believed")]
    assert [(f.label, f.text) for f in believed] == [(f.label, f.text) for f in section1]
    assert believed[0].label == "Believed: allocated (scheduler) utilization A/W" and believed[0].text == "37.5 %"


def _hosts(host: str, gpus: int, held_gpus: int, n: int = N) -> tuple[list[dict], list[dict]]:
    samples, procs = [], []
    for g in range(gpus):
        rows = gpu_rows(host, f"{host}-{g}", n, sm=0.5 if g < held_gpus else 0.0, procs=int(g < held_gpus))
        samples += rows
        if g < held_gpus:
            procs += proc_rows(host, f"{host}-{g}", ends(rows), pid=100 + g)
    return samples, procs


def test_allocations_are_billed_host_by_host(tmp_path: Path) -> None:
    """Host a: 8 GPUs allocated all the time, processes on 2; host b (no scheduler): processes on all 8. The
    billed demand was max(fleet held, fleet allocated) = max(10, 8) = 10: b's held GPUs cancelled a's allocation.
    Host by host it is 8 + 8 = 16. The allocation comes in as the scheduler writes it (sacct --parsable2, the
    fields `gpuaudit import slurm` asks for) through the importer."""
    from zoneinfo import ZoneInfo

    from gpuaudit.importer.slurm import import_sacct

    sa, pa = _hosts("a", 8, 2)
    sb, pb = _hosts("b", 8, 8)
    write(tmp_path, sa + sb, pa + pb)
    sacct = ("JobID|JobIDRaw|User|Account|Partition|State|Start|End|NodeList|AllocTRES\n"
             "4242|4242|alice|phys|gpu|COMPLETED|2026-03-01T23:00:00|2026-03-02T09:00:00|a|"
             "billing=64,cpu=64,gres/gpu=8,mem=512G,node=1\n")
    import_sacct(tmp_path, sacct, tz=ZoneInfo("UTC"), now=T0 + dt.timedelta(days=1))
    r = analyze(tmp_path)
    assert r.hybrid.peak_demand.value == pytest.approx(16.0, abs=1e-6)
    assert r.break_even.measured_billed == pytest.approx(1.0, rel=1e-6)


def test_an_allocation_while_its_agent_was_silent_is_not_billed_twice(tmp_path: Path) -> None:
    """Host a: 8 GPUs allocated and held all 8 h, its agent reporting the first 4 h only; host b: 8 idle GPUs
    reporting throughout. While a was silent its 8 allocated GPUs passed the cap (b reported 8) and were then
    scaled × 16 ÷ 8: a peak of 16 and all on-prem buying 16. The silence is a coverage gap (scaled from the GPUs
    that reported); the allocation counts only where its host reported."""
    sa, pa = _hosts("a", 8, 8, n=4 * HOUR)
    sb, pb = _hosts("b", 8, 0)
    write(tmp_path, sa + sb, pa + pb)
    write_allocations(tmp_path, frame([_alloc("1", "a", 8, 0, 8)]), "slurm")
    r = analyze(tmp_path)
    assert r.hybrid.peak_demand.value <= 8.0 + 1e-6  # it was 16


def test_chargeback_prices_waste_as_the_report_does(tmp_path: Path) -> None:
    """The chargeback priced idle GPU-hours at the on-demand list price ($6.88) while the report's waste in dollars
    used the flexible price ($3.17): the same idle hours were $2.6k in the report and $5.6k in the CSVs. One price
    per use: waste is priced at the flexible price everywhere."""
    samples, procs = _node()
    write(tmp_path, samples, procs)
    write_allocations(tmp_path, frame(ALLOCS), "slurm")
    r = analyze(tmp_path)
    flexible = r.costs.cloud_flexible_usd_per_gpu_hour.value
    assert r.chargeback is not None and r.chargeback.usd_per_gpu_hour == pytest.approx(flexible)
    assert flexible != pytest.approx(r.costs.cloud_usd_per_gpu_hour.value)  # the two cards differ
    acct = {x["account"]: x for x in r.chargeback.by_account.rows}["phys"]
    assert acct["unused_usd"] == pytest.approx(acct["unused_gpu_hours"] * flexible)


def _billed_vs_allocated(tmp_path: Path, samples: list[dict], procs: list[dict], allocs: list[dict]):  # type: ignore[no-untyped-def]
    write(tmp_path, samples, procs)
    write_allocations(tmp_path, frame(allocs), "slurm")
    r = analyze(tmp_path)
    w = r.ledger.observed_gpu_hours.value or 0.0
    billed = w - (r.ledger.unallocated.value or 0.0)  # allocated or active: what the cloud bills
    return r, billed / w


def test_billed_hours_are_never_below_allocated_within_an_hour(tmp_path: Path) -> None:
    """The phantom demo (16 GPUs, 14 days, seed 4) read "measured billed-hour utilization 60.25 %" beside
    "allocated 60.33 %": billed is held or, where larger, allocated, so it can never be below allocated. Job 1 had
    both GPUs allocated and idle for the first half hour, job 2 both held the second: the hour's mean beyond-held
    (1 GPU) was spread evenly over the hour's buckets and clipped where both GPUs were held, 1.5 GPU-h billed
    against 2 allocated. The hour's extra goes where the GPUs were free."""
    half = 30
    g = [gpu_rows("n1", f"g{i}", HOUR, sm=lambda j: 0.5 if j >= half else 0.0, procs=lambda j: int(j >= half))
         for i in range(2)]
    procs = [p for i, rows in enumerate(g) for p in
             proc_rows("n1", f"g{i}", ends(rows, lambda j: j >= half), job_id="2", pid=100 + i)]
    allocs = [_alloc("1", "n1", 2, 0, 0.5), _alloc("2", "n1", 2, 0.5, 1)]
    r, billed = _billed_vs_allocated(tmp_path, g[0] + g[1], procs, allocs)
    allocated = r.utilization.believed_utilization.value or 0.0  # allocations imported: believed is A/W
    assert allocated == pytest.approx(1.0)
    assert r.break_even.measured_billed == pytest.approx(billed, rel=1e-6)
    assert r.break_even.measured_billed >= allocated - 1e-9  # it was 0.75


def test_a_mig_slice_is_billed_at_its_share_once(tmp_path: Path) -> None:
    """The billed demand weighted a MIG slice's hours by gpu_fraction twice (the rollup's observed_s already
    carries it): a 3g.40gb slice allocated 2 h, used 1 h, billed (3/7)² of a GPU beyond its use instead of 3/7."""
    n = 3 * HOUR
    s1 = gpu_rows("n1", "g0", n, mig_instance=1, gpu_fraction=3 / 7, sm=lambda i: 0.5 if i < HOUR else 0.0,
                  procs=lambda i: int(i < HOUR))
    s2 = gpu_rows("n1", "g0", n, mig_instance=2, gpu_fraction=4 / 7)
    procs = proc_rows("n1", "g0", ends(s1, lambda i: i < HOUR), job_id="800", mig_instance=1)
    r, billed = _billed_vs_allocated(tmp_path, s1 + s2, procs, [{**_alloc("800", "n1", 3 / 7, 0, 2),
                                                                 "mig_profile": "3g.40gb"}])
    assert billed == pytest.approx(2 * 3 / 7 / 3)
    assert r.break_even.measured_billed == pytest.approx(billed, rel=1e-6)


def _pod_alloc(pod: str, uid: str, host: str, gpus: float, h0: float, h1: float) -> dict:
    return {**_alloc(f"ml/{pod}", host, gpus, h0, h1), "job_id_raw": uid, "user": None, "account": None,
            "partition": None, "namespace": "ml", "state": "Running", "source": schema.ALLOC_SOURCE_KUBERNETES}


def _window(a: float, b: float):  # type: ignore[no-untyped-def]
    return lambda i: a * HOUR <= i < b * HOUR


@pytest.mark.parametrize("label", ["name", "uid"])
def test_a_recreated_pod_gets_only_its_own_gpus(label: str) -> None:
    """Issue 27.1: a StatefulSet pod ml/web-0 ran (uid A) on g0-g3 from 0 h to 4 h, its processes from 0 h to 2 h;
    deleted and recreated (uid B) on g4-g7 from 6 h to 10 h, processes from 6 h to 8 h. The GPUs an allocation
    was matched to came from its name joined to holders in every hour, so each incarnation was spread over all
    8 GPUs (half its process hours counted allocated-with-no-process on the other incarnation's idle GPUs).
    Matched only in the hours each allocation overlaps (and by pod UID where the series carry it, as the agent's
    cgroup fallback does): each lands on its own 4 GPUs."""
    n = 12 * HOUR
    samples: list[dict] = []
    procs: list[dict] = []
    for k in range(8):
        run = _window(0, 2) if k < 4 else _window(6, 8)
        rows = gpu_rows("n1", f"g{k}", n, sm=lambda i, run=run: 0.5 if run(i) else 0.0,
                        procs=lambda i, run=run: int(run(i)))
        samples += rows
        pod = ("web-0" if label == "name" else ("uid-a" if k < 4 else "uid-b"))
        procs += proc_rows("n1", f"g{k}", ends(rows, run), pod=pod)
    allocs = [_pod_alloc("web-0", "uid-a", "n1", 4, 0, 4), _pod_alloc("web-0", "uid-b", "n1", 4, 6, 10)]
    roll = rollups(samples, procs, allocs)
    led, m = ledger(roll.gpu_hours, roll.holders, roll.allocations, T0.timestamp(),
                    (T0 + dt.timedelta(hours=12)).timestamp(), False)
    v = {s: getattr(led, s).value for s in STATES}
    assert v == pytest.approx({"productive": 8.0, "held_idle": 8.0, "allocated_no_process": 16.0,
                               "unallocated": 64.0}, abs=1e-6)
    g = m.gpu_hours.with_columns(pl.col("gpu_uuid").str.slice(1).cast(pl.Int32).alias("k"),
                                 ((pl.col("hour_s") - T0.timestamp()) / 3600).alias("h"))
    wrong = g.filter(((pl.col("k") >= 4) & (pl.col("h") < 4)) | ((pl.col("k") < 4) & (pl.col("h") >= 6)))
    assert wrong["allocated_s"].sum() == pytest.approx(0.0, abs=1e-6)
    assert led.inferred_share.value == pytest.approx(0.0, abs=1e-9)


def test_an_unmatched_allocation_goes_to_held_unlabelled_gpus_first() -> None:
    """Issue 27.2: on a node whose device plugin runs deviceIDStrategy=index, dcgm-exporter's series carry no
    pod labels: the pod's 2 GPUs (g2, g3) are held (framebuffer in use, a process present) but no process row
    names the pod. Its allocation matched no labelled process and went to the idle GPUs g0, g1, which it did
    not hold (8 GPU-h allocated with no process, 8 too few unallocated). A process can only use a GPU allocated
    to it: the held, unlabelled GPUs come first."""
    n = 4 * HOUR
    samples = (gpu_rows("n2", "g0", n) + gpu_rows("n2", "g1", n)
               + gpu_rows("n2", "g2", n, sm=0.5, procs=1, mem_used_bytes=40_000_000_000)
               + gpu_rows("n2", "g3", n, sm=0.5, procs=1, mem_used_bytes=40_000_000_000))
    roll = rollups(samples, None, [_pod_alloc("train", "uid-t", "n2", 2, 0, 4)])
    led, m = ledger(roll.gpu_hours, roll.holders, roll.allocations, T0.timestamp(),
                    (T0 + dt.timedelta(hours=4)).timestamp(), False)
    v = {s: getattr(led, s).value for s in STATES}
    assert v == pytest.approx({"productive": 4.0, "held_idle": 4.0, "allocated_no_process": 0.0,
                               "unallocated": 8.0}, abs=1e-6)
    idle = m.gpu_hours.filter(pl.col("gpu_uuid").is_in(["g0", "g1"]))
    assert idle["allocated_s"].sum() == pytest.approx(0.0, abs=1e-6)
    assert led.allocated_gpu_hours.value == pytest.approx(8.0)


def _outside(tmp_path: Path, allocs: list[dict]) -> tuple:  # type: ignore[type-arg]
    samples = [r for k in range(2) for r in gpu_rows("n1", f"g{k}", N, sm=0.3, procs=1)]
    procs = [p for k in range(2) for p in proc_rows("n1", f"g{k}", ends(samples[k * N:(k + 1) * N]), job_id="77")]
    roll = rollups(samples, procs, allocs)
    return ledger(roll.gpu_hours, roll.holders, roll.allocations, T0.timestamp(),
                  (T0 + dt.timedelta(hours=8)).timestamp(), False)


def test_held_time_outside_every_allocation_is_warned_with_its_likely_cause(tmp_path: Path) -> None:
    """Issue 27.6: when most held GPU-hours ran outside any imported allocation, believed read below real
    without a word (held_outside_allocation_gpu_hours only in the JSON). A warning with the share and the likely
    cause: the allocations' window, or job ids that match none of them; in the result's warnings (report,
    analyze, and `report`'s terminal) and first among the ledger's notes."""
    # Job 77 held 2 GPUs for 8 h; its allocation was imported for the first hour only: the window.
    _, m = _outside(tmp_path, [_alloc("77", "n1", 2, 0, 1)])
    assert len(m.warnings) == 1
    w = m.warnings[0]
    assert w.startswith("14.0 of 16.0 held GPU-hours (88%) on hosts with allocations ran outside any imported")
    assert "Likely cause: the window" in w and "2026-03-02 00:00 to 2026-03-02 01:00 UTC" in w
    # The allocation covers the whole window but names another job: the id form (or another cluster).
    led, m = _outside(tmp_path, [_alloc("5", "n1", 1, 0, 8)])
    assert "match no imported allocation (e.g. 77)" in m.warnings[0]
    assert led.notes[0] == "Warning: " + m.warnings[0]
    # Matched: no warning.
    led, m = _outside(tmp_path, [_alloc("77", "n1", 2, 0, 8)])
    assert m.warnings == () and not any(n.startswith("Warning") for n in led.notes)
    # Through the pipeline: in the result's warnings.
    samples = [r for k in range(2) for r in gpu_rows("n1", f"g{k}", N, sm=0.3, procs=1)]
    write(tmp_path / "d", samples, [p for k in range(2) for p in
                                     proc_rows("n1", f"g{k}", ends(samples[k * N:(k + 1) * N]), job_id="77")])
    write_allocations(tmp_path / "d", frame([_alloc("77", "n1", 2, 0, 1)]), "slurm")
    assert any("ran outside any imported allocation" in x for x in analyze(tmp_path / "d").warnings)


def test_outside_allocation_warning_reaches_the_report_and_the_terminal(tmp_path: Path) -> None:
    """Issue 27.6: the warning is in report.md and on `report`'s stderr (in the one `gpuaudit: warning:` format),
    not only in the JSON."""
    from tests.helpers import run_cli

    samples = [r for k in range(2) for r in gpu_rows("n1", f"g{k}", N, sm=0.3, procs=1)]
    write(tmp_path / "d", samples, [p for k in range(2) for p in
                                     proc_rows("n1", f"g{k}", ends(samples[k * N:(k + 1) * N]), job_id="77")])
    write_allocations(tmp_path / "d", frame([_alloc("77", "n1", 2, 0, 1)]), "slurm")
    r = run_cli("report", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "out"), "--format", "md", "--quiet")
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "gpuaudit: warning: 14.0 of 16.0 held GPU-hours (88%) on hosts with allocations ran outside" in err
    assert "ran outside any imported allocation" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")


def test_chargeback_tells_a_recreated_pod_by_its_uid(tmp_path: Path) -> None:
    """A StatefulSet pod ml/web-0 (uid-a) holds g0, g1 from 0:00 to 2:40 and is deleted; its next incarnation
    (uid-b, the same name) holds g2, g3 from 2:40 to 4:00, SM 0.5 while held. kube-state-metrics gives each
    incarnation its own `uid` (internal/store/pod.go): two allocation rows, job_id ml/web-0, job_id_raw the UID;
    the processes carry the pod_uid (the agent's cgroup). Matched by name only, the two were one job of 8 GPU-h;
    matched by UID first (as the ledger does, analysis/jobkeys.py), each is its own job with its own hours."""
    from gpuaudit.analysis import utilization as ut
    from gpuaudit.analysis.chargeback import job_table
    from gpuaudit.analysis.stage1.rollup import load_rollups

    n, swap = 4 * HOUR, 160  # samples; uid-a's last sample ends at 2:40
    pods = {"uid-a": (("g0", "g1"), lambda i: i < swap), "uid-b": (("g2", "g3"), lambda i: i >= swap)}
    samples, procs = [], []
    for uid, (gpus, on) in pods.items():
        for g in gpus:
            rows = gpu_rows("n1", g, n, sm=lambda i, on=on: 0.5 if on(i) else 0.0, procs=lambda i, on=on: int(on(i)))
            samples += rows
            procs += [r | {"pod_uid": uid} for r in proc_rows("n1", g, ends(rows, on), pod="web-0")]
    write(tmp_path, samples)
    store.write_table(tmp_path, schema.PROCESSES, pl.DataFrame(procs, infer_schema_length=None).with_columns(
        pl.col("mig_instance").cast(pl.Int16), pl.col("pid").cast(pl.Int32)))
    swap_h = swap / HOUR
    allocs = [_alloc("ml/web-0", "n1", 2, 0, swap_h) | {"job_id_raw": "uid-a"},
              _alloc("ml/web-0", "n1", 2, swap_h, 4) | {"job_id_raw": "uid-b"}]
    allocs = [a | {"source": schema.ALLOC_SOURCE_KUBERNETES, "namespace": "ml", "account": None,
                   "partition": None, "state": "Succeeded"} for a in allocs]
    write_allocations(tmp_path, frame(allocs), schema.ALLOC_SOURCE_KUBERNETES)
    roll = load_rollups(tmp_path, cache=False)
    assert roll.holders.select("pod_uid").unique().sort("pod_uid")["pod_uid"].to_list() == ["uid-a", "uid-b"]
    jobs, _ = job_table(ut.holder_hours(roll), roll.allocations, T0.timestamp(),
                        (T0 + dt.timedelta(hours=4)).timestamp())
    got = sorted((r["job"], round(r["allocated_s"] / 60, 6), round(r["held_s"] / 60, 6), round(r["real_s"] / 60, 6))
                 for r in jobs.iter_rows(named=True))
    a, b = 2 * swap, 2 * (n - swap)  # GPU-minutes
    assert got == [("ml/web-0", b, b, b / 2), ("ml/web-0", a, a, a / 2)]


def test_the_matching_rule_is_one_numbered_list_naming_what_the_code_has() -> None:
    """docs/importer.md states the ledger's matching rule in order, as one numbered list (1 to 9, nothing
    between), and the functions, modules and ledger figures it names exist."""
    import importlib
    import re

    from gpuaudit.analysis.result import Ledger

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "docs" / "importer.md").read_text(encoding="utf-8")
    section = text.split("## How the ledger matches an allocation to GPUs", 1)[1].split("\nTests:", 1)[0]
    items = [int(m) for m in re.findall(r"^(\d+)\. ", section, flags=re.M)]
    assert items == list(range(1, 10)), items
    body = section[section.index("\n1. "):]
    assert not re.search(r"\n\n(?!\d+\. )\S", body.rstrip()), "the list is broken by a paragraph"
    for module, name in re.findall(r"analysis/(\w+)\.py `(\w+)`", section):
        assert hasattr(importlib.import_module(f"gpuaudit.analysis.{module}"), name), (module, name)
    assert {"unmapped_gpu_hours", "inferred_share"} <= {f.name for f in dataclasses.fields(Ledger)}
