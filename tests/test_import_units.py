"""The importer's pure parts: time arguments, metric/label mapping, MIG fractions, chunking, PromQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import chunks, transport
from gpuaudit.importer.prometheus import query_for
from gpuaudit.importer.prometheus.mapping import build_mapping, gpu_fraction
from gpuaudit.importer.timespec import align_down, parse_duration_s, parse_step_s, parse_time

NOW = datetime(2026, 3, 1, 12, 30, 15, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("now", NOW),
    ("-30d", NOW - timedelta(days=30)),
    ("-6h", NOW - timedelta(hours=6)),
    ("-1h30m", NOW - timedelta(minutes=90)),
    ("-2w", NOW - timedelta(weeks=2)),
    ("2026-01-05", datetime(2026, 1, 5, tzinfo=UTC)),
    ("2026-01-05T10:00:00", datetime(2026, 1, 5, 10, tzinfo=UTC)),  # naive -> UTC
    ("2026-01-05T10:00:00Z", datetime(2026, 1, 5, 10, tzinfo=UTC)),
    ("2026-01-05T12:00:00+02:00", datetime(2026, 1, 5, 10, tzinfo=UTC)),  # converted to UTC
])
def test_parse_time_forms_are_utc(text: str, expected: datetime) -> None:
    got = parse_time(text, now=NOW)
    assert got == expected
    assert got.utcoffset() == timedelta(0)


def test_parse_time_converts_a_non_utc_now() -> None:
    now = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert parse_time("now", now=now).tzinfo == UTC
    assert parse_time("-1h", now=now) == datetime(2026, 3, 1, 11, 0, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "-30x", "2026-13-01", "", "-", "30d"])
def test_parse_time_rejects_garbage(text: str) -> None:
    with pytest.raises(GpuauditError, match="bad"):
        parse_time(text, now=NOW)


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60), ("5m", 300), ("1h", 3600), ("90", 90),
                                               ("1m30s", 90), ("1d", 86400)])
def test_parse_step(text: str, seconds: int) -> None:
    assert parse_step_s(text) == seconds


@pytest.mark.parametrize("text", ["0s", "500ms", "1.5", "fast", "5 m", "-5m"])
def test_parse_step_rejects_non_whole_or_bad(text: str) -> None:
    with pytest.raises(GpuauditError, match=r"step|duration"):
        parse_step_s(text)


def test_parse_duration_units() -> None:
    assert parse_duration_s("250ms") == 0.25
    assert parse_duration_s("1w") == 7 * 86400


def test_align_down_lands_on_the_step_grid() -> None:
    t = datetime(2026, 1, 5, 10, 7, 33, tzinfo=UTC)
    assert align_down(t, 300) == datetime(2026, 1, 5, 10, 5, tzinfo=UTC)
    assert align_down(t, 60) == datetime(2026, 1, 5, 10, 7, tzinfo=UTC)


@pytest.mark.parametrize(("profile", "model", "fraction"), [
    (None, "NVIDIA H100 80GB HBM3", 1.0),
    ("3g.40gb", "NVIDIA A100-SXM4-80GB", 3 / 7),
    ("1g.10gb", "NVIDIA A100-SXM4-80GB", 1 / 7),
    ("7g.80gb", "NVIDIA A100-SXM4-80GB", 1.0),
    ("1g.10gb+me", "NVIDIA H100 80GB HBM3", 1 / 7),
    ("1c.3g.40gb", "NVIDIA A100-SXM4-80GB", 3 / 7),  # compute instance: its GPU instance's share
    ("2g.12gb", "NVIDIA A30", 2 / 4),  # A30 has 4 slices
    ("weird", "NVIDIA H100", 1 / 7),
])
def test_gpu_fraction_rule(profile: str | None, model: str, fraction: float) -> None:
    assert gpu_fraction(profile, model) == pytest.approx(fraction)


def test_chunks_cover_the_grid_once_and_respect_the_point_limit() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(hours=10)
    got = list(chunks(start, end, 60, max_points=100))
    points = []
    for first, last in got:
        n = int((last - first).total_seconds()) // 60 + 1
        assert n <= 100
        points += [first + timedelta(seconds=60 * i) for i in range(n)]
    assert points == [start + timedelta(seconds=60 * i) for i in range(1, 601)]  # (start, end], no repeats


def test_chunks_default_limit_stays_under_prometheus_11000() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for first, last in chunks(start, start + timedelta(days=30), 60):
        assert (last - first).total_seconds() / 60 + 1 <= 11_000


def test_queries_ask_for_interval_averages() -> None:
    assert query_for("DCGM_FI_PROF_SM_ACTIVE", "avg", "", 60) == "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[59999ms])"
    assert query_for("X", "increase", 'job="dcgm"', 300) == 'increase(X{job="dcgm"}[299999ms])'
    assert query_for("X", "last", "", 1) == "last_over_time(X[999ms])"


def test_mapping_overrides_metric_names_units_and_labels() -> None:
    m = build_mapping(["duty_cycle=nvidia_smi_utilization_gpu_ratio:ratio", "energy_j="],
                      ["host=node", "gpu_uuid=uuid"], selector='{job="gpu"}')
    assert m.metrics["duty_cycle"].names == ("nvidia_smi_utilization_gpu_ratio",)
    assert m.factor("duty_cycle") == 1.0
    assert "energy_j" not in m.metrics
    assert m.labels["host"] == ("node",)
    assert m.selector == 'job="gpu"'
    assert build_mapping().factor("duty_cycle") == 0.01  # dcgm reports percent
    assert build_mapping().factor("fb_used") == 1024 * 1024  # MiB


@pytest.mark.parametrize(("metrics", "labels", "match"), [
    (["nonsense=X"], [], "unknown field"),
    (["duty_cycle"], [], "FIELD=NAME"),
    (["duty_cycle=X:watts"], [], "does not fit"),
    (["duty_cycle=bad-name"], [], "not a Prometheus metric name"),
    (["sm_active=", "gr_engine_active=", "duty_cycle="], [], "at least one"),
    ([], ["host=bad label"], "not a Prometheus label name"),
])
def test_mapping_rejects_bad_overrides(metrics: list[str], labels: list[str], match: str) -> None:
    with pytest.raises(GpuauditError, match=match):
        build_mapping(metrics, labels)


def test_transport_validates_and_reads_secrets(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("GPUAUDIT_PROM_TOKEN", raising=False)
    monkeypatch.delenv("GPUAUDIT_PROM_PASSWORD", raising=False)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert transport("http://p:9090/", bearer_token_file=token).bearer_token == "s3cret"
    monkeypatch.setenv("GPUAUDIT_PROM_TOKEN", "from-env")
    assert transport("http://p:9090").bearer_token == "from-env"
    monkeypatch.delenv("GPUAUDIT_PROM_TOKEN")
    monkeypatch.setenv("GPUAUDIT_PROM_PASSWORD", "pw")
    assert transport("http://p:9090", user="u").password == "pw"
    assert transport("http://p:9090/api/v1").url == "http://p:9090"
    with pytest.raises(GpuauditError, match="bad --url"):
        transport("p:9090")
    with pytest.raises(GpuauditError, match="cannot read"):
        transport("http://p:9090", bearer_token_file=tmp_path / "missing")
    with pytest.raises(GpuauditError, match="not both"):
        transport("http://p:9090", ca_file=token, insecure=True)
    with pytest.raises(GpuauditError, match="--ca-file"):
        transport("http://p:9090", ca_file=tmp_path / "nope.pem")
