"""Stage 2's price-free results kept for the next run (analysis/facts.py). A memo, never a source of truth: a
re-run with another price reads neither the dataset nor the rollup entry and gives what a cold run gives; a
setting the reading depends on, a changed dataset or a torn entry is read again; a memo anyone else can write is
never unpickled."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from tests.test_rollup_cache import _close

from gpuaudit.analysis import facts
from gpuaudit.analysis import pipeline as pl_
from gpuaudit.analysis.config import Config, load_config
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.analysis.pipeline import analyze
from gpuaudit.analysis.stage1 import cache as rcache
from gpuaudit.analysis.stage1 import rollup
from gpuaudit.sim.bulk import simulate

POISONED: list[str] = []


def _poisoned(what: str) -> None:
    POISONED.append(what)  # by reference: a bound list.append would pickle a copy of the list


class _Poison:
    """Unpickling this runs code: what a planted memo would do."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_poisoned, ("unpickled",))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Several GPU models and their scheduler allocations: the pools, the chargeback's matching, right-sizing."""
    root = tmp_path_factory.mktemp("memo") / "data"
    simulate(root, "mixed-models", days=4, interval_s=600.0, seed=3)
    return root


def _copy(fleet: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(fleet, tmp_path / "data")
    return tmp_path / "data"


def _json(root: Path, cfg: Config | None = None, *, cache: bool = True, **kw: Any) -> dict[str, Any]:
    return json.loads(json.dumps(analyze(root, cfg, Overrides(**kw), cache=cache).to_dict(), default=str))


def _priced(cfg: Config) -> Config:
    return cfg.replace("on_prem", hardware_usd_per_gpu=cfg.on_prem.hardware_usd_per_gpu * 1.37,
                       staff_usd_per_month=cfg.on_prem.staff_usd_per_month + 5000.0)


def _planted() -> bytes:
    """A well-formed entry (header, the payload's digest) whose pickle runs code."""
    import hashlib

    payload = pickle.dumps(_Poison())
    return facts._MAGIC + hashlib.sha256(payload).digest() + payload


def _entries() -> list[Path]:
    return sorted(facts._CACHE.directory().glob(f"*{facts.SUFFIX}"))


def _no_rollups(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("the rollups were read")

    monkeypatch.setattr(pl_, "load_keyed", refuse)
    monkeypatch.setattr(rcache, "load", refuse)
    monkeypatch.setattr(rollup, "_read", refuse)


def test_a_rerun_with_another_price_reads_no_rollups_and_equals_a_cold_run(fleet: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """29: a warm run at 1,000 GPUs x 90 days with a new price still loaded 554 MB of GPU-hours and redid the
    allocation mapping, the chargeback's job matching and the breakdowns (19.5 s, 2.8 GB), none of which a
    price moves. Now it reads the kept Facts: no rollup entry, no frame of GPU-hours; every figure as cold."""
    root = _copy(fleet, tmp_path)
    base = load_config()
    cold = _json(root, cache=False)
    _close(cold, _json(root))  # fills the rollup entry, its stamp and the memo
    assert len(_entries()) == 1
    new = _priced(base)
    cold_new = _json(root, new, cache=False, egress_gb_per_week=300.0)
    assert cold_new["costs"] != cold["costs"]
    _no_rollups(monkeypatch)
    _close(cold_new, _json(root, new, egress_gb_per_week=300.0))
    _close(cold, _json(root))
    assert len(_entries()) == 1  # one reading, whatever the prices


@pytest.mark.parametrize("change", [
    {"current": "cloud"}, {"data_residency": True}, {"latency_sensitive_share": 0.4}, {"fleet_gpus": 60},
    {"cfg": ("analysis", "stopped_reporting_after_hours", 1.0)},
    {"cfg": ("decision", "provisional_below_days", 2.0)},
])
def test_a_setting_the_reading_depends_on_reads_the_rollups_again(fleet: Path, tmp_path: Path,
                                                                  change: dict[str, Any]) -> None:
    """Each setting a price-free result depends on is in the memo's key: a change is read again, as cold."""
    root = _copy(fleet, tmp_path)
    cfg = load_config()
    kw = dict(change)
    if "cfg" in kw:
        section, key, value = kw.pop("cfg")
        cfg = cfg.replace(section, **{key: value})
    _json(root)
    _close(_json(root, cfg, cache=False, **kw), _json(root, cfg, **kw))
    assert len(_entries()) == 2


def test_a_changed_dataset_never_uses_the_old_reading(fleet: Path, tmp_path: Path) -> None:
    """A file removed between runs changes the tree's stamp: the memo of the old snapshot is not used."""
    root = _copy(fleet, tmp_path)
    _json(root)
    victim = sorted((root / "gpu_samples").rglob("*.parquet"))[-1]
    victim.unlink()
    _close(_json(root, cache=False), _json(root))


def test_the_fleet_has_several_model_pools(fleet: Path) -> None:
    """The memo's per-pool paths (each pool's measure, days and right-sizing input) are the ones exercised."""
    from gpuaudit.analysis.stage1.rollup import load_rollups

    f = facts.read(load_rollups(fleet, cache=False), facts.knobs(pl_.apply(load_config(), Overrides())), "")
    assert len(f.specs) > 1 and len(f.pool_me) == len(f.specs) == len(f.sizing) == len(f.pool_days)


def test_a_torn_memo_is_read_again(fleet: Path, tmp_path: Path) -> None:
    root = _copy(fleet, tmp_path)
    cold = _json(root, cache=False)
    _json(root)
    (entry,) = _entries()
    entry.write_bytes(entry.read_bytes()[:1000])
    _close(cold, _json(root))
    assert entry.stat().st_size > 1000  # written again whole


def test_a_damaged_memo_is_a_miss_and_is_written_again(fleet: Path, tmp_path: Path) -> None:
    """Review of 29: a memo with one byte changed (bit rot; the same length) unpickled into a Facts with other
    figures, or failed every warm run for good (a hit is never rewritten). The payload's digest is checked
    first: a damaged entry is a miss, and the run writes it again."""
    root = _copy(fleet, tmp_path)
    cold = _json(root, cache=False)
    _json(root)
    (entry,) = _entries()
    data = bytearray(entry.read_bytes())
    at = data.find(b"tail_idle_s")
    assert at > 0
    data[at + 10] = ord("x")  # a column name: unpickled as it is, this fails stage 2
    entry.write_bytes(bytes(data))
    _close(cold, _json(root))
    assert entry.read_bytes().find(b"tail_idle_s") == at  # written again whole


def test_an_install_without_sources_keeps_no_memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of 29: with compiled files only, the code digest hashed only the data files, so an upgrade that
    changed stage 2's code kept reading the old memo. Without a source file there is no memo."""
    import gpuaudit

    pkg = tmp_path / "gpuaudit"
    (pkg / "catalog").mkdir(parents=True)
    (pkg / "__init__.pyc").write_bytes(b"compiled")
    (pkg / "catalog" / "models.toml").write_text("[x]\n")
    monkeypatch.setattr(gpuaudit, "__file__", str(pkg / "__init__.pyc"))
    assert facts._code_digest() is None
    (pkg / "__init__.py").write_text("")
    assert facts._code_digest() is not None


def test_a_read_only_rollup_cache_still_skips_the_rollups(fleet: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of 29: where the rollup entry's time could not be touched (a read-only .rollups), known() said
    nothing was known and every warm run loaded the whole entry. The touch is best effort; the stamp is taken
    once per run."""
    from gpuaudit.store import reader

    root = _copy(fleet, tmp_path)
    cold = _json(root, cache=False)
    _json(root)
    stamps: list[str] = []
    real_stamp = reader.tree_stamp
    monkeypatch.setattr(reader, "tree_stamp", lambda r: stamps.append(str(r)) or real_stamp(r))
    _close(_json(root, cache=False, fleet_gpus=60), _json(root, fleet_gpus=60))  # memo miss, rollup hit
    assert len(stamps) == 1  # taken once
    stamps.clear()
    _json(root)
    assert len(stamps) == 1

    def refuse(*a: Any, **k: Any) -> None:
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(rcache.os, "utime", refuse)
    _no_rollups(monkeypatch)
    _close(cold, _json(root))


def test_a_memo_anyone_else_can_write_is_never_unpickled(fleet: Path, tmp_path: Path) -> None:
    """An entry is a pickle: one planted in a directory others can write (or a file others can write) would run
    their code as this user. Neither is read; the run reads the rollups and equals a cold run."""
    root = _copy(fleet, tmp_path)
    cold = _json(root, cache=False)
    _json(root)
    (entry,) = _entries()
    entry.write_bytes(_planted())
    entry.chmod(0o666)
    _close(cold, _json(root))
    assert POISONED == []
    entry.write_bytes(_planted())
    entry.chmod(0o600)
    facts._CACHE.directory().chmod(0o777)
    try:
        _close(cold, _json(root))
        assert POISONED == []
    finally:
        facts._CACHE.directory().chmod(0o700)
    _close(cold, _json(root))  # the control: the same entry in this user's own cache is read (and is no Facts)
    assert POISONED == ["unpickled"]
    POISONED.clear()
