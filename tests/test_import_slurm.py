"""`gpuaudit import slurm`: sacct --parsable2 output into gpu_allocations.

The fixture tests/data/sacct/cluster.txt is shaped as Slurm's own sources print it (src/sacct/print.c: User and
Partition only on job rows, Account on steps too, `CANCELLED by <uid>`, `Unknown` times, `None assigned`; the
sacct man page: JobID forms 123_4 / 123+0, AllocTRES, --parsable2 without a trailing '|')."""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gpuaudit.errors import GpuauditError
from gpuaudit.importer import hostlist
from gpuaudit.importer.slurm import FIELDS, parse_sacct, parse_tres
from gpuaudit.store import open_dataset
from helpers import one_error_line, run_cli

FIXTURE = Path(__file__).parent / "data" / "sacct" / "cluster.txt"
# The same kind of cluster as `sacct --json` prints it (data_parser v0.0.44, src/plugins/data_parser/v0.0.44/
# parsers.c: PARSER_ARRAY(JOB), (STEP), (TRES)): job times as UNIX seconds, step times and array / het ids as
# {set, infinite, number}, state.current a list, tres.allocated [{type, name, id, count}], steps' nodes.list.
JSON_FIXTURE = Path(__file__).parent / "data" / "sacct" / "cluster.json"
NOW = datetime(2026, 1, 5, 16, 0, tzinfo=UTC)
# Allocated GPU-hours per job of the fixture, by hand (tz UTC, --now 16:00Z).
EXPECTED_GPU_H = {"1001": 2 * 4, "1002": 16 * 6, "1003_4": 1 * 2, "1004+1": 1 * 1, "1006": 3 / 7 * 0.7,
                  "1008": 6 * 1.5, "1009": 8 * 0.75}


def _hours(row: dict) -> float:
    return row["gpus"] * (row["end_ts"] - row["start_ts"]).total_seconds() / 3600


def test_job_rows_give_the_allocation_and_steps_are_never_added() -> None:
    """Each job's GPU-hours are exact: steps (.batch, .extern, .0, .interactive) repeat the job's GPUs in their
    own AllocTRES and must not be summed with it."""
    out = parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW)
    per_job: dict[str, float] = {}
    for r in out.rows:
        per_job[r["job_id"]] = per_job.get(r["job_id"], 0.0) + _hours(r)
    assert per_job.keys() == EXPECTED_GPU_H.keys()
    for job, h in EXPECTED_GPU_H.items():
        assert per_job[job] == pytest.approx(h, abs=1e-9), job
    assert out.jobs == 7 and len(out.rows) == 10
    assert out.skipped == {"pending (no allocation yet)": 2, "no GPU in AllocTRES": 2}


def test_user_and_partition_come_from_the_job_row_and_ids_keep_their_forms() -> None:
    rows = {(r["job_id"], r["host"]): r for r in parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW).rows}
    array = rows[("1003_4", "dgx-a100-04")]
    assert (array["job_id_raw"], array["user"], array["partition"], array["state"]) == (
        "1010", "carol", "gpu", "TIMEOUT")
    het = rows[("1004+1", "dgx-a100-05")]
    assert (het["job_id_raw"], het["user"], het["account"]) == ("1005", "dave", "bio")
    assert rows[("1006", "dgx-h100-01")]["state"] == "CANCELLED"
    assert rows[("1008", "dgx-a100-01")]["state"] == "NODE_FAIL"
    assert rows[("1009", "dgx-h100-02")]["state"] == "PREEMPTED"


def test_gres_type_gives_the_gpu_model() -> None:
    """Issue 25.6: a typed GRES (gres/gpu:a100, gres/gpu:h100) is the allocation's gpu_type and its catalogue key
    its gpu_model; untyped GPUs and MIG-only types leave the model empty (the catalogue's rule: a bare a100 is the
    40 GB card)."""
    rows = parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW).rows
    models = {r["job_id"]: (r["gpu_type"], r["gpu_model"]) for r in rows}
    assert models == {"1001": ("a100", "a100-40gb"), "1002": (None, None), "1003_4": ("a100", "a100-40gb"),
                      "1004+1": (None, None), "1006": (None, None), "1008": ("a100", "a100-40gb"),
                      "1009": ("h100", "h100-sxm-80gb")}


def test_running_job_is_closed_at_now_and_split_over_its_nodes() -> None:
    rows = [r for r in parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW).rows if r["job_id"] == "1002"]
    assert sorted(r["host"] for r in rows) == ["dgx-a100-02", "dgx-a100-03"]
    assert all(r["gpus"] == 8 and r["end_ts"] == NOW and r["state"] == "RUNNING" for r in rows)
    three = [r for r in parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW).rows if r["job_id"] == "1008"]
    assert sorted(r["host"] for r in three) == ["dgx-a100-01", "dgx-a100-02", "dgx-a100-05"]
    assert all(r["gpus"] == 2 for r in three)


def _per_host(rows: list[dict]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        out.setdefault(r["job_id"], {})[r["host"]] = r["gpus"]
    return out


def test_sacct_json_steps_say_how_a_multi_node_job_was_spread() -> None:
    """Issue 27.7: a multi-node job's GPUs were split evenly over its nodes because sacct's job row does not say
    how. `sacct --json` (and the text's step rows) do: the batch step holds the job's GRES on its first node
    (src/stepmgr/stepmgr.c, step_set_alloc_tres), a one-node step at least its own on its node. 2001: 4 + 2 of
    6 (not 3 + 3); 2008: 2 on the first node, 3 on the node its one-node step ran on, the 1 left on the third;
    2002 has only steps over all its nodes: split evenly, and said."""
    out = parse_sacct(JSON_FIXTURE.read_text(), tz=ZoneInfo("Europe/Berlin"), now=NOW)  # UNIX times: no --tz
    per = _per_host(out.rows)
    assert per["2001"] == {"gpu-h100-01": 4, "gpu-h100-02": 2}
    assert per["2008"] == {"gpu-a100-01": 2, "gpu-a100-02": 3, "gpu-a100-05": 1}
    assert per["2002"] == pytest.approx({h: 8 / 3 for h in ("gpu-a100-01", "gpu-a100-02", "gpu-a100-03")})
    assert out.even_split == 1 and "e.g. 2002" in out.warnings()[0]
    rows = {r["job_id"]: r for r in out.rows}
    assert rows.keys() == {"2001", "2002", "2003_4", "2004+1", "2006", "2008"}
    assert (rows["2003_4"]["job_id_raw"], rows["2003_4"]["state"], rows["2003_4"]["gpu_model"]) == (
        "2010", "TIMEOUT", "a100-40gb")
    assert (rows["2004+1"]["job_id_raw"], rows["2004+1"]["user"], rows["2004+1"]["account"]) == ("2005", "dave", "bio")
    assert (rows["2006"]["mig_profile"], rows["2006"]["gpus"]) == ("3g.40gb", pytest.approx(3 / 7))
    assert (rows["2002"]["state"], rows["2002"]["end_ts"]) == ("RUNNING", NOW)
    assert (rows["2001"]["start_ts"], rows["2001"]["end_ts"], rows["2001"]["gpu_model"]) == (
        datetime(2026, 1, 5, 9, tzinfo=UTC), datetime(2026, 1, 5, 13, tzinfo=UTC), "h100-sxm-80gb")
    assert out.skipped == {"pending (no allocation yet)": 1, "no GPU in AllocTRES": 1}
    assert out.examples["pending (no allocation yet)"] == "2011_[5-9]"


def test_text_step_rows_say_it_too() -> None:
    """The text's step rows carry the same NodeList and AllocTRES: a batch step's GPUs are its job's on the
    first node (they were split evenly, 3 and 3)."""
    text = ("JobID|JobIDRaw|State|Start|End|NodeList|AllocTRES\n"
            "7|7|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n[1-2]|cpu=8,gres/gpu=6,node=2\n"
            "7.batch|7.batch|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|cpu=4,gres/gpu=4,node=1\n"
            "7.extern|7.extern|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n[1-2]|cpu=8,gres/gpu=6,node=2\n")
    out = parse_sacct(text, tz=UTC, now=NOW)
    assert _per_host(out.rows) == {"7": {"n1": 4, "n2": 2}} and out.warnings() == []


@pytest.mark.parametrize(("text", "needle"), [
    ('{"jobs": [', "not JSON"),
    ('{"meta": {}}', 'no "jobs" list'),
    ('{"jobs": [{"job_id": "x"}]}', "jobs[0]: not a job"),
    ('{"jobs": [{"job_id": 1, "state": {"current": ["COMPLETED"]}, "time": {"start": "noon"}}]}', "bad time.start"),
])
def test_malformed_sacct_json_is_one_error(text: str, needle: str) -> None:
    with pytest.raises(GpuauditError, match=re.escape(needle)):
        parse_sacct(text, tz=UTC, now=NOW)


def test_mig_slice_counts_as_its_share_of_a_gpu() -> None:
    (row,) = [r for r in parse_sacct(FIXTURE.read_text(), tz=UTC, now=NOW).rows if r["job_id"] == "1006"]
    assert row["gpus"] == pytest.approx(3 / 7) and row["mig_profile"] == "3g.40gb"
    assert parse_tres("gres/gpu:nvidia_a100_1g.10gb=2", "j").gpus == pytest.approx(2 / 7)
    assert parse_tres("gres/gpu:a100=2,gres/gpu=2", "j").gpus == 2
    assert parse_tres("gres/gpu:a100=2", "j").gpu_type == "a100"
    assert parse_tres("gres/gpu=4", "j").gpus == 4
    assert parse_tres("cpu=4,mem=8G,node=1", "j") is None
    assert parse_tres("gres/gpu=0,cpu=1", "j") is None  # a no_consume GRES prints as zero


def test_local_times_follow_tz_and_explicit_offsets_win() -> None:
    berlin = parse_sacct(FIXTURE.read_text(), tz=ZoneInfo("Europe/Berlin"), now=NOW)
    r = next(r for r in berlin.rows if r["job_id"] == "1001")
    assert r["start_ts"] == datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # 09:00 CET = 08:00 UTC
    text = ("JobID|State|Start|End|NodeList|AllocTRES\n"
            "7|COMPLETED|2026-07-01T10:00:00+0200|2026-07-01T11:00:00+02:00|n1|gres/gpu=1\n")
    (row,) = parse_sacct(text, tz=ZoneInfo("Asia/Tokyo"), now=NOW).rows
    assert row["start_ts"] == datetime(2026, 7, 1, 8, 0, tzinfo=UTC)
    assert row["end_ts"] == datetime(2026, 7, 1, 9, 0, tzinfo=UTC)


def test_parsable_with_trailing_bar_is_read_too() -> None:
    text = ("JobID|State|Start|End|NodeList|AllocTRES|\n"
            "8|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|gres/gpu=2|\n")
    (row,) = parse_sacct(text, tz=UTC, now=NOW).rows
    assert row["gpus"] == 2


@pytest.mark.parametrize(("text", "needle"), [
    ("1|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|gres/gpu=1\n", "not a header"),
    ("JobID|State|Start|End|NodeList|AllocTRES\n9|COMPLETED|2026-01-05T10:00:00|n1|gres/gpu=1\n",
     "line 2 (job 9): 5 fields"),
    ("JobID|State|Start|End|NodeList|AllocTRES\n9|COMPLETED|01/05-10:00:00|2026-01-05T11:00:00|n1|gres/gpu=1\n",
     "job 9: unknown time format"),
    ("JobID|State|Start|End|NodeList|AllocTRES\n9|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n[1-|"
     "gres/gpu=1\n", "bad host list"),
    ("JobID|State|Start|End|NodeList|AllocTRES\n9|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|"
     "gres/gpu=two\n", "job 9: bad GPU count"),
    ("", "empty"),
])
def test_malformed_input_is_one_error_naming_the_job(text: str, needle: str) -> None:
    with pytest.raises(GpuauditError, match=None) as e:
        parse_sacct(text, tz=UTC, now=NOW)
    assert needle in str(e.value)


def test_end_before_start_is_skipped_and_counted() -> None:
    text = ("JobID|State|Start|End|NodeList|AllocTRES\n"
            "5|COMPLETED|2026-01-05T10:00:00|2026-01-05T09:00:00|n1|gres/gpu=1\n"
            "6|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|gres/gpu=1\n")
    out = parse_sacct(text, tz=UTC, now=NOW)
    assert [r["job_id"] for r in out.rows] == ["6"]
    assert out.skipped == {"ends before it starts": 1} and out.examples["ends before it starts"] == "5"


@pytest.mark.parametrize(("text", "hosts"), [
    ("dgx-a100-[01-02,05]", ["dgx-a100-01", "dgx-a100-02", "dgx-a100-05"]),
    ("gpu[8-10],cpu7", ["gpu8", "gpu9", "gpu10", "cpu7"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a,a", ["a"]),
])
def test_host_lists_expand(text: str, hosts: list[str]) -> None:
    assert hostlist.expand(text) == hosts


@pytest.mark.parametrize("text", ["n[1-", "n]", "n[a]", "n[5-1]", "n[1-100000000]", "a,,b", "n[[1]]"])
def test_bad_host_lists_are_refused(text: str) -> None:
    with pytest.raises(GpuauditError):
        hostlist.expand(text)


def _allocated(root: Path) -> tuple[int, float]:
    with open_dataset(root) as ds:
        n, h = ds.fetchall("SELECT count(*), sum(gpus * epoch(end_ts - start_ts) / 3600) FROM allocations")[0]
    return n, h


def test_cli_import_is_exact_and_idempotent(tmp_path: Path) -> None:
    """Allocated GPU-hours read back from the dataset are the hand-computed ones; importing the same output
    again (or a longer one that overlaps it) replaces rows instead of adding them."""
    args = ("import", "slurm", "--sacct-file", str(FIXTURE), "--tz", "UTC", "--now", "2026-01-05T16:00:00Z",
            "--data", str(tmp_path))
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert "imported 10 allocation rows (7 jobs, 122.3 GPU-hours allocated)" in r.stdout
    assert "skipped 2 jobs: no GPU in AllocTRES (e.g. 1004+0)" in r.stderr
    n, h = _allocated(tmp_path)
    assert n == 10 and h == pytest.approx(sum(EXPECTED_GPU_H.values()), abs=1e-9)
    # Later, the running job 1002 has ended: its row is replaced, nothing doubles.
    later = FIXTURE.read_text().replace("1002|1002|bob|chem|gpu-long|RUNNING|2026-01-05T10:00:00|Unknown|",
                                        "1002|1002|bob|chem|gpu-long|COMPLETED|2026-01-05T10:00:00|"
                                        "2026-01-05T18:00:00|")
    r = run_cli("import", "slurm", "--sacct-file", "-", "--tz", "UTC", "--now", "2026-01-05T20:00:00Z",
                "--data", str(tmp_path), input_text=later)
    assert r.returncode == 0, r.stderr
    assert "replaced 10 rows" in r.stdout
    n, h = _allocated(tmp_path)
    assert n == 10 and h == pytest.approx(sum(EXPECTED_GPU_H.values()) + 16 * 2, abs=1e-9)
    with open_dataset(tmp_path) as ds:
        assert ds.fetchall("SELECT DISTINCT state FROM allocations WHERE job_id = '1002'") == [("COMPLETED",)]


def test_cli_reimport_in_the_right_zone_replaces_rows_by_job_identity(tmp_path: Path) -> None:
    """Issue 27.5: the same sacct file imported first in the wrong zone (UTC), then with --tz Europe/Berlin (the
    obvious fix) left 20 rows for 7 jobs and doubled the GPU-hours, silently: rows were matched on their start
    time, which the zone moved. They are matched on the scheduler's identity (job id, host, MIG profile) and
    replaced, and the CLI says how many."""
    base = ("import", "slurm", "--sacct-file", str(FIXTURE), "--now", "2026-01-05T16:00:00Z", "--data", str(tmp_path))
    r = run_cli(*base, "--tz", "UTC")
    assert r.returncode == 0, r.stderr
    r = run_cli(*base, "--tz", "Europe/Berlin")
    assert r.returncode == 0, r.stderr
    assert "replaced 10 rows of earlier imports" in r.stdout
    n, h = _allocated(tmp_path)
    # Berlin is UTC+1 in January: every start is an hour earlier; the running 1002 runs to --now, 1 h longer.
    assert n == 10 and h == pytest.approx(sum(EXPECTED_GPU_H.values()) + 16 * 1, abs=1e-9)
    with open_dataset(tmp_path) as ds:
        starts = ds.fetchall("SELECT DISTINCT start_ts FROM allocations WHERE job_id = '1001'")
    assert starts == [(datetime(2026, 1, 5, 8, 0, tzinfo=UTC),)]


def test_cli_runs_sacct_itself_with_offsets_in_its_times(tmp_path: Path) -> None:
    """Without --sacct-file gpuaudit runs sacct with every user, the fields it needs and the window, and asks
    for times with their offset (SLURM_TIME_FORMAT), so --tz does not matter then."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "args.txt"
    body = re.sub(r"(T\d\d:\d\d:\d\d)\|", r"\1+0100|", FIXTURE.read_text())  # as %z prints them
    (tmp_path / "out.txt").write_text(body)
    script = bindir / "sacct"
    script.write_text(f"#!/bin/sh\necho \"$SLURM_TIME_FORMAT $*\" > {log}\ncat {tmp_path / 'out.txt'}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    r = run_cli("import", "slurm", "--start", "2026-01-01", "--end", "2026-01-06", "--tz", "Asia/Tokyo",
                "--now", "2026-01-05T16:00:00Z", "--data", str(tmp_path / "d"), env=env)
    assert r.returncode == 0, r.stderr
    called = log.read_text()
    assert called.startswith("%Y-%m-%dT%H:%M:%S%z ")
    for arg in ("--allusers", "--parsable2", f"--format={','.join(FIELDS)}", "-S", "-E"):
        assert arg in called.split(), arg
    with open_dataset(tmp_path / "d") as ds:
        (start,) = ds.fetchall("SELECT start_ts FROM allocations WHERE job_id = '1001'")[0]
    assert start == datetime(2026, 1, 5, 8, 0, tzinfo=UTC)  # 09:00+01:00, not Tokyo time


def test_cli_malformed_input_writes_nothing(tmp_path: Path) -> None:
    bad = FIXTURE.read_text().replace("2026-01-05T12:00:00|2026-01-05T13:30:00", "2026-01-05 12:00|2026-01-05T13:30:00")
    r = run_cli("import", "slurm", "--sacct-file", "-", "--tz", "UTC", "--data", str(tmp_path), input_text=bad)
    assert "job 1008: unknown time format" in one_error_line(r)
    assert not (tmp_path / "gpu_allocations").exists()
    r = run_cli("import", "slurm", "--sacct-file", str(tmp_path / "missing.txt"), "--data", str(tmp_path))
    assert "cannot read --sacct-file" in one_error_line(r)
    r = run_cli("import", "slurm", "--sacct-file", str(FIXTURE), "--tz", "Nowhere/City", "--data", str(tmp_path))
    assert "unknown time zone" in one_error_line(r)
    r = run_cli("import", "slurm", "--data", str(tmp_path), env={"PATH": str(tmp_path)})
    assert "sacct is not on PATH" in one_error_line(r)


def test_cli_imports_sacct_json(tmp_path: Path) -> None:
    r = run_cli("import", "slurm", "--sacct-file", str(JSON_FIXTURE), "--now", "2026-01-05T16:00:00Z",
                "--data", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "imported 11 allocation rows (6 jobs" in r.stdout
    assert "gpuaudit: warning: 1 multi-node job (e.g. 2002): GPUs split evenly" in r.stderr
    n, h = _allocated(tmp_path)
    assert n == 11 and h == pytest.approx(6 * 4 + 8 * 6 + 2 + 1 + 3 / 7 * 0.7 + 6 * 1.5, abs=1e-9)


def test_cli_reports_hosts_without_telemetry(tmp_path: Path) -> None:
    (tmp_path / "gpu_samples" / "host=dgx-a100-01").mkdir(parents=True)
    r = run_cli("import", "slurm", "--sacct-file", str(FIXTURE), "--tz", "UTC", "--now", "2026-01-05T16:00:00Z",
                "--data", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "warning: 6 hosts have allocations but no telemetry" in r.stderr


def test_cli_skips_and_warnings_use_the_one_warning_format_and_plurals(tmp_path: Path) -> None:
    """Issue 26.15: `import slurm` printed "warning: ..." and "skipped 1 jobs" outside the README's
    `gpuaudit: warning:` format, and "1 jobs" / "1 hosts" / "1 allocation rows"."""
    text = ("JobID|State|Start|End|NodeList|AllocTRES\n"
            "5|COMPLETED|2026-01-05T10:00:00|2026-01-05T09:00:00|n1|gres/gpu=1\n"
            "6|COMPLETED|2026-01-05T10:00:00|2026-01-05T11:00:00|n1|gres/gpu=1\n")
    (tmp_path / "gpu_samples" / "host=n2").mkdir(parents=True)
    r = run_cli("import", "slurm", "--sacct-file", "-", "--tz", "UTC", "--now", "2026-01-05T16:00:00Z",
                "--data", str(tmp_path), input_text=text)
    assert r.returncode == 0, r.stderr
    assert "imported 1 allocation row (1 job," in r.stdout, r.stdout
    lines = r.stderr.splitlines()
    assert "gpuaudit: warning: skipped 1 job: ends before it starts (e.g. 5)" in lines, r.stderr
    assert any(line.startswith("gpuaudit: warning: 1 host has allocations but no telemetry") for line in lines), \
        r.stderr
    assert all(line.startswith("gpuaudit: ") for line in lines), r.stderr


def test_cli_help_says_a_header_line_is_required() -> None:
    """Issue 26.15: `import slurm --help` did not say the sacct output needs its header line."""
    r = run_cli("import", "slurm", "--help")
    assert r.returncode == 0
    assert "header line" in " ".join(r.stdout.split())


def test_the_telemetry_says_how_a_multi_node_job_was_spread(tmp_path: Path) -> None:
    """sacct's text without step rows does not say how job 9's 8 GPUs were spread over n1 and n2; the dataset's
    processes do: its job id (the cgroup's SLURM_JOB_ID, JobIDRaw) on 6 GPUs of n1 and 2 of n2 while it ran.
    The rows say 6 and 2, not 4 and 4, and the even-split warning names only job 11, which no process shows.
    Job 10's process on n2 and job 9's id on a GPU after its end are not job 9's spread."""
    from analysis_helpers import ends, gpu_rows, proc_rows, write
    from gpuaudit.importer.slurm import import_sacct

    t0 = datetime(2026, 1, 5, 10, tzinfo=UTC)
    samples, procs = [], []
    held = {("n1", k): "9" for k in range(6)} | {("n2", 0): "9", ("n2", 1): "9", ("n2", 2): "10"}
    for host in ("n1", "n2", "n3", "n4"):
        for k in range(8):
            rows = gpu_rows(host, f"GPU-{host}-{k}", 180, start=t0)  # 10:00 to 13:00
            samples += rows
            job = held.get((host, k))
            if job:
                procs += proc_rows(host, f"GPU-{host}-{k}", ends(rows, lambda i: i < 120), job_id=job)
    late = gpu_rows("n2", "GPU-n2-7", 180, start=t0)
    procs += proc_rows("n2", "GPU-n2-7", ends(late, lambda i: i >= 150), job_id="9")  # 12:30 on: after its end
    write(tmp_path, samples, procs)
    text = ("JobID|JobIDRaw|State|Start|End|NodeList|AllocTRES\n"
            "9|9|COMPLETED|2026-01-05T10:00:00|2026-01-05T12:00:00|n[1-2]|cpu=16,gres/gpu=8,node=2\n"
            "11|11|COMPLETED|2026-01-05T10:00:00|2026-01-05T12:00:00|n[3-4]|cpu=16,gres/gpu=8,node=2\n")
    summary = import_sacct(tmp_path, text, tz=UTC, now=NOW)
    with open_dataset(tmp_path) as ds:
        got = ds.fetchall("SELECT job_id, host, gpus FROM allocations ORDER BY job_id, host")
    assert got == [("11", "n3", 4), ("11", "n4", 4), ("9", "n1", 6), ("9", "n2", 2)]
    assert len(summary.warnings) == 1 and "1 multi-node job (e.g. 11)" in summary.warnings[0], summary.warnings
