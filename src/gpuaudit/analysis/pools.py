"""GPU model pools: a fleet that mixes models is priced per model, each pool at its own model's prices.

A pool is the GPUs of one catalogue key (gpuaudit.catalog.identify of the reported name; a MIG slice belongs to
its parent's model) with the demand, allocations and power measured on them (analysis.measure, as the fleet is).
Each figure a pool is priced at comes, in order, from: the config's [models."<key>"] table; the fleet's own
[cloud] / [on_prem] setting where the fleet has one model and the setting was stated (a file, an option, a
preset other than the default); the catalogue; the fleet's setting (an assumed price, flagged by modelsfound).

With one pool the fleet is that pool: the plans are today's plans at its prices. With several, each pool's plans
leave out the costs that do not grow with a pool (the base staff, a new build's network, egress and managed
services): the fleet plan adds them once, whoever owns or rents. The fleet's "hybrid" is the per-model plan that
costs least with those costs counted once (own one model's steady base, rent another's work).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl

from gpuaudit.analysis import costs
from gpuaudit.analysis.breakeven import BreakEvenCalc, own_reference
from gpuaudit.analysis.cloudmix import combined
from gpuaudit.analysis.config import Config, load_config
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Figure
from gpuaudit.analysis.fleet import Fleet, Measured, fleet, fleet_mean, fleet_series
from gpuaudit.analysis.scenarios import CostBlock, CostDraws, Plan, cost_block, cost_draws, with_cash
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.catalog import ModelSpec, identify

# The model figures a pool is priced at, and the fleet setting each stands in for.
_PRICED: tuple[tuple[str, str, str], ...] = (
    ("instance_usd_per_hour", "cloud", "instance_usd_per_hour"),
    ("gpus_per_instance", "cloud", "gpus_per_instance"),
    ("hardware_usd_per_gpu", "on_prem", "hardware_usd_per_gpu"),
    ("busy_watts_per_gpu", "on_prem", "fallback_watts_per_gpu"),  # flat at the board's busy power, as the fleet's
    ("gpus_per_node", "on_prem", "gpus_per_node"),
)
# What a pool of several leaves to the fleet, counted once: (section, key).
_FLEET_FIXED: tuple[tuple[str, str], ...] = (
    ("on_prem", "staff_usd_per_month"), ("on_prem", "networking_usd"), ("cloud", "egress_gb_per_week"),
    ("cloud", "managed_services_usd_once"), ("cloud", "managed_services_usd_per_month"))
_MIX_CANDIDATES = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")


@dataclass(frozen=True)
class PoolSpec:
    """One model's GPUs: its key, the first name it reported, every name reported, its GPUs (UUIDs) and hosts."""

    key: str
    gpu_name: str
    names: frozenset[str]
    uuids: frozenset[str]
    hosts: frozenset[str]

    @property
    def gpus(self) -> int:
        return len(self.uuids)


def pools_of(roll: Rollups) -> tuple[PoolSpec, ...]:
    """The model pools of the rollups, most GPUs first (then by key)."""
    per = (roll.gpu_hours.group_by("gpu_uuid")
           .agg(pl.col("gpu_name").drop_nulls().first(), pl.col("mem_total_bytes").max(), pl.col("host").first())
           .sort("gpu_uuid"))
    found: dict[str, dict[str, set[str]]] = {}
    first: dict[str, str] = {}
    for uuid, name, mem, host in per.iter_rows():
        key = identify(name, int(mem) if mem else None)[0]
        slot = found.setdefault(key, {"names": set(), "uuids": set(), "hosts": set()})
        slot["names"].add(name or "")
        slot["uuids"].add(str(uuid))
        slot["hosts"].add(str(host))
        first.setdefault(key, name or "")
    specs = [PoolSpec(k, first[k], frozenset(v["names"]), frozenset(v["uuids"]), frozenset(v["hosts"]))
             for k, v in found.items()]
    return tuple(sorted(specs, key=lambda s: (-s.gpus, s.key)))


def subset(roll: Rollups, spec: PoolSpec) -> Rollups:
    """The rollups of one pool: its GPUs' hours, holders and demand; the allocations on its hosts, except those
    whose GPU type names another model (a host with two models and untyped allocations lends them to both)."""
    uuids = list(spec.uuids)
    names = [n for n in spec.names if n]
    by_name = pl.col("gpu_name").is_in(names) | (pl.col("gpu_name").is_null() if "" in spec.names else pl.lit(False))
    alloc = roll.allocations
    if alloc is not None and alloc.height:
        # the importer's model key where it has one, else the GPU type's (an older dataset)
        typed = alloc["gpu_type"].map_elements(lambda t: identify(t)[0] if t else "", return_dtype=pl.String)
        if "gpu_model" in alloc.columns:
            typed = alloc["gpu_model"].fill_null("").zip_with(alloc["gpu_model"].fill_null("") != "", typed)
        alloc = alloc.filter(pl.col("host").is_in(list(spec.hosts)) & ((typed == "") | (typed == spec.key)))
    return dataclasses.replace(
        roll,
        gpu_hours=roll.gpu_hours.filter(pl.col("gpu_uuid").is_in(uuids)),
        demand=roll.demand.filter(by_name),
        holders=roll.holders.filter(pl.col("gpu_uuid").is_in(uuids)),
        elastic_gpus=roll.elastic_gpus.filter(pl.col("gpu_uuid").is_in(uuids)),
        elastic_demand=roll.elastic_demand.filter(by_name),
        allocations=alloc,
    )


@lru_cache(maxsize=1)
def _defaults() -> Config:
    return load_config()


def _stated(cfg: Config, dotted: str) -> bool:
    """Whether the user (a file, an option, Config.replace) or a preset other than the default set this
    setting: its source says so, or it differs from the default preset's."""
    section, key = dotted.split(".")
    changed = getattr(getattr(cfg, section), key) != getattr(getattr(_defaults(), section), key)
    return changed or cfg.sources.get(dotted, "default") != "default"


def _largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """`total` split in proportion to `weights`, in whole units that sum to it (largest remainders first)."""
    w = np.asarray(weights, dtype=float)
    if total <= 0 or not w.size or w.sum() <= 0:
        return [0] * len(weights)
    raw = w / w.sum() * total
    out = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - out), kind="stable")[: total - int(out.sum())]:
        out[i] += 1
    return [int(x) for x in out]


@dataclass(frozen=True)
class Pricing:
    """How each pool is priced from a fleet config: which figure came from where (`source` per pool and figure:
    "models", "fleet", "catalogue" or "assumed"), and the fleet settings split over the pools."""

    base: Config
    specs: tuple[PoolSpec, ...]
    source: tuple[dict[str, str], ...]
    fleet_gpus: tuple[int, ...]  # per pool: 0 = the GPUs seen
    owned_gpus: tuple[int, ...]  # per pool: -1 = every GPU when on-prem

    @property
    def many(self) -> bool:
        return len(self.specs) > 1

    def config(self, i: int, cfg: Config | None = None) -> Config:
        """Pool i's config, derived from `cfg` (the base, or the base with one input moved: a model figure
        moves by the same factor as the fleet setting it stands in for)."""
        cfg = cfg or self.base
        spec = self.base.models.get(self.specs[i].key)
        out = cfg
        for figure, section, key in _PRICED:
            where = self.source[i][figure]
            if where not in ("models", "catalogue") or spec is None:
                continue
            value = getattr(spec, figure)
            base_v, now_v = getattr(getattr(self.base, section), key), getattr(getattr(cfg, section), key)
            moved = value * (now_v / base_v) if base_v else value
            out = out.replace(section, **{key: type(base_v)(round(moved) if isinstance(base_v, int) else moved)})
        out = dataclasses.replace(out, load_power=self._load_power(i, out))
        if self.many:
            out = out.replace("analysis", fleet_gpus=self.fleet_gpus[i])
            out = out.replace("on_prem", owned_gpus=self.owned_gpus[i])
            for section, key in _FLEET_FIXED:
                out = out.replace(section, **{key: 0.0})
        return out

    def _load_power(self, i: int, out: Config) -> tuple[float, float, str] | None:
        """Pool i's model's idle and busy board power, where its power fallback is the model's (not the fleet's
        stated or assumed figure) and the model has both: the busy power as `out` prices it (moved with the
        fleet setting it stands in for), the idle power moved by the same factor."""
        spec = self.base.models.get(self.specs[i].key)
        if spec is None or self.source[i]["busy_watts_per_gpu"] not in ("models", "catalogue"):
            return None
        idle, busy = spec.idle_watts_per_gpu, spec.busy_watts_per_gpu
        if idle is None or busy is None:
            return None
        now = out.on_prem.fallback_watts_per_gpu
        from_file = any(f"models.{spec.key}.{f}" in self.base.sources for f in ("idle_watts_per_gpu",
                                                                                  "busy_watts_per_gpu"))
        return (idle * now / busy if busy else idle, now,
                f"{'[models]' if from_file else 'catalogue'} idle/busy by load")

    def single_config(self) -> Config:
        """The one pool's config as the fleet's: its model's figures where the fleet did not state its own, each
        changed value's source naming the catalogue (or the [models] table) it came from."""
        if not self.specs:
            return self.base
        out = self.config(0)
        spec = self.base.models.get(self.specs[0].key)
        sources = dict(self.base.sources)
        for figure, section, key in _PRICED:
            where = self.source[0][figure]
            if spec is None or where not in ("models", "catalogue"):
                continue
            if getattr(getattr(out, section), key) != getattr(getattr(self.base, section), key):
                src = spec.sources.get(figure)
                sources[f"{section}.{key}"] = (self.base.sources.get(f"models.{spec.key}.{figure}", "")
                                               if where == "models" else
                                               f"catalogue {spec.key}: {src.text if src else ''}")
        return dataclasses.replace(out, sources=sources)


def pricing(cfg: Config, specs: tuple[PoolSpec, ...]) -> Pricing:
    many = len(specs) > 1
    sources: list[dict[str, str]] = []
    for s in specs:
        spec: ModelSpec | None = cfg.models.get(s.key)
        row: dict[str, str] = {}
        for figure, section, key in _PRICED:
            value = getattr(spec, figure) if spec is not None else None
            if value is not None and f"models.{s.key}.{figure}" in cfg.sources:
                row[figure] = "models"
            elif not many and _stated(cfg, f"{section}.{key}"):
                row[figure] = "fleet"
            elif value is not None:
                row[figure] = "catalogue"
            else:
                row[figure] = "assumed"
        sources.append(row)
    seen = [float(s.gpus) for s in specs]
    stated_fleet = cfg.analysis.fleet_gpus
    fleet_split = _largest_remainder(stated_fleet, seen) if stated_fleet else [0] * len(specs)
    owned = cfg.on_prem.owned_gpus
    sizes = [f or int(g) for f, g in zip(fleet_split, seen, strict=True)]
    owned_split = _largest_remainder(owned, sizes) if owned >= 0 else [-1] * len(specs)
    return Pricing(cfg, specs, tuple(sources), tuple(fleet_split), tuple(owned_split))


def overridden_fleet_prices(p: Pricing) -> list[str]:
    """The fleet settings a config stated that a fleet of several models prices per model instead."""
    if not p.many:
        return []
    return [f"{section}.{key}" for figure, section, key in _PRICED if _stated(p.base, f"{section}.{key}")
            and any(src[figure] in ("catalogue", "models") for src in p.source)]


# ------------------------------------------------------------------------------------------ the fleet's plans


@dataclass(frozen=True)
class Part:
    """One pool as the cost model prices it."""

    spec: PoolSpec
    cfg: Config
    m: Measured


@dataclass(frozen=True)
class Composed:
    """The fleet's plans built from its pools: `block` is what the rest of the analysis reads (the same shape as
    one pool's), `blocks` each pool's own, `picks` for every fleet plan the pool plan each pool runs."""

    block: CostBlock
    blocks: tuple[CostBlock, ...]
    picks: dict[str, tuple[str, ...]]
    fixed_owned: dict[str, float]
    fixed_rented: dict[str, float]
    dominant: int  # the pool with the most held GPU-hours: its hybrid sizing curve is the one drawn


def _fixed_owned(cfg: Config, tl: costs.Timeline, existing: int) -> dict[str, float]:
    """The costs of owning anything that no pool carries: the base staff, and a new build's fixed network."""
    o = cfg.on_prem
    parts = {"staff": o.staff_usd_per_month * tl.annuity, "networking": 0.0, "residual_value": 0.0}
    if existing == 0 and o.networking_usd > 0:
        charge, residual = costs.capital(np.array([o.networking_usd]), o.networking_amortization_years, 0.0, tl,
                                         o.capex_timing)
        parts["networking"], parts["residual_value"] = float(charge[0]), float(residual[0])
    return parts


def _owns(s: CostScenario) -> bool:
    return s.owned_gpus > 0


def _rents(s: CostScenario) -> bool:
    return s.cloud_gpu_hours > 1e-9 or s.components.get("cloud_reserved", 0.0) + s.components.get(
        "cloud_flexible", 0.0) > 1e-9


def _add(parts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _gpus_of(n: int, key: str) -> str:
    return f"{n:,} {key}"


def action(key: str, s: CostScenario, existing: int) -> str:
    """What a pool plan does with the pool's GPUs, in counts: "keep the 8 h100-sxm-80gb", "rent the t4 work,
    sell the 32 t4"."""
    n, rents = s.owned_gpus, _rents(s)
    if n <= 0:
        sold = f", sell the {_gpus_of(existing, key)}" if existing else ""
        return f"rent the {key} work{sold}"
    if n == existing:
        own = f"keep the {_gpus_of(n, key)}"
    elif n < existing:
        own = f"keep {n:,} of the {_gpus_of(existing, key)}, sell {existing - n:,}"
    elif existing:
        own = f"keep the {_gpus_of(existing, key)} and buy {n - existing:,} more"
    else:
        own = f"own {_gpus_of(n, key)}"
    return own + (f", rent {key} demand above them" if rents else "")


def _combine(cfg: Config, tl: costs.Timeline, sid: str, label: str, chosen: Sequence[CostScenario],
             keys: Sequence[str], existing: Sequence[int], fixed_owned: dict[str, float],
             fixed_rented: dict[str, float]) -> CostScenario:
    owns, rents = any(_owns(s) for s in chosen), any(_rents(s) for s in chosen)
    parts = _add([dict(s.components) for s in chosen] + ([fixed_owned] if owns else [])
                 + ([fixed_rented] if rents else []))
    total = float(sum(parts.values()))
    what = "; ".join(action(k, s, e) for k, s, e in zip(keys, chosen, existing, strict=True))
    fixed = [n for n, on in (("the base staff and a new build's network", owns),
                             ("egress and managed services", rents)) if on]
    each = ", ".join(f"{k}: {s.id}" for k, s in zip(keys, chosen, strict=True))
    formula = (f"Σ over the model pools of each pool's plan ({each})"
               + (" + " + " + ".join(fixed) + ", counted once" if fixed else ""))
    return CostScenario(
        id=sid, label=label, description=what[0].upper() + what[1:] + ".",
        cloud_gpu_hours=float(sum(s.cloud_gpu_hours for s in chosen)), owned_gpus=sum(s.owned_gpus for s in chosen),
        total=Figure(total, "USD", formula, "cost model (config, each model's prices) × each pool's fleet-scaled "
                     "demand series", f"Present value of '{label}' over {tl.months} months."),
        components=parts, monthly_usd=total / tl.months if tl.months else 0.0,
        what_if=any(s.what_if for s in chosen), allowed=all(s.allowed for s in chosen),
        reserved_gpus=float(sum(s.reserved_gpus for s in chosen)),
        priced_mix=combined([(s.priced_mix, s.cloud_gpu_hours) for s in chosen]),
    )


def best_mix(blocks: Sequence[CostBlock], fixed_owned: float, fixed_rented: float) -> tuple[str, ...]:
    """Each pool's plan that makes the fleet cheapest with the fixed costs counted once: for each way the fleet
    may own (yes / no) and rent (yes / no), every pool takes its cheapest allowed plan that fits, and the fleet
    takes the cheapest of the four (exact: the fixed costs depend only on those two flags)."""
    best: tuple[float, tuple[str, ...]] | None = None
    for may_own in (False, True):
        for may_rent in (False, True):
            picks: list[str] = []
            total = (fixed_owned if may_own else 0.0) + (fixed_rented if may_rent else 0.0)
            for b in blocks:
                fits = [s for s in b.scenarios if s.id in _MIX_CANDIDATES and s.allowed and not s.what_if
                        and (may_own or not _owns(s)) and (may_rent or not _rents(s))]
                if not fits:
                    break
                s = min(fits, key=lambda x: (round(x.total.value or 0.0, 2), _MIX_CANDIDATES.index(x.id)))
                picks.append(s.id)
                total += float(s.total.value or 0.0)
            else:
                if best is None or total < best[0] - 0.005:
                    best = (total, tuple(picks))
    if best is None:  # no plan is allowed in some pool: the pools' own hybrids (not allowed, shown as such)
        return tuple("hybrid" for _ in blocks)
    return best[1]


def _blend(blocks: Sequence[CostBlock], weights: np.ndarray) -> costs.CloudPrices:
    w = weights / weights.sum() if weights.sum() > 0 else np.full(len(blocks), 1.0 / len(blocks))

    def avg(f: Callable[[costs.CloudPrices], float]) -> float:
        return float(sum(wi * f(b.prices) for wi, b in zip(w, blocks, strict=True)))
    return costs.CloudPrices(avg(lambda p: p.list), avg(lambda p: p.reserved), avg(lambda p: p.flexible),
                             avg(lambda p: p.blended), 1)


def _break_even(cfg: Config, tl: costs.Timeline, blocks: Sequence[CostBlock], m: Measured, fl: Fleet,
                held: np.ndarray, fixed_owned: float, fixed_rented: float) -> BreakEvenCalc:
    """The fleet's break-even from its pools': renting k × every pool's billed demand against owning every pool
    (keeping what is owned, buying the rest), the fixed costs once."""
    bes = [b.break_even for b in blocks]
    own = sum(b.own_usd for b in bes) + fixed_owned
    fixed = sum(b.rent_fixed_usd for b in bes) + fixed_rented
    variable = sum(b.rent_variable_usd for b in bes)
    cloud = sum(b.cloud_usd for b in bes) + fixed_rented
    ref = own_reference(fl)
    measured = fleet_mean(m, fl, held)
    verdict = "cloud" if cloud < own and not (m.data_residency or m.latency_share > 0) else "on-prem"
    if measured <= 0 or variable <= 1e-9:
        return BreakEvenCalc(None, measured, ref, own, cloud, verdict, fixed, variable)
    k = (own - fixed) / variable
    return BreakEvenCalc(max(k, 0.0) * measured, measured, ref, own, cloud, verdict, fixed, variable)


def compose(cfg: Config, parts: Sequence[Part], m_fleet: Measured, growth: float = 0.0, *,
            what_if: bool = True, blocks: Sequence[CostBlock] | None = None) -> Composed:
    """The fleet's plans from its pools (`parts`, priced on their own configs), `m_fleet` the whole fleet as
    measured (its demand series is what the fleet-wide figures read)."""
    from gpuaudit.analysis.scenarios import cheapest_of, payback_against

    tl = costs.timeline(cfg)
    built = tuple(blocks) if blocks is not None else tuple(cost_block(p.cfg, p.m, growth, what_if=what_if)
                                                            for p in parts)
    keys = [p.spec.key for p in parts]
    existing = [b.fleet.existing for b in built]
    fl = Fleet(capacity=sum(b.fleet.capacity for b in built), gpus=sum(b.fleet.gpus for b in built),
               existing=sum(existing), age_years=cfg.on_prem.owned_age_years,
               elastic=sum(b.fleet.elastic for b in built))
    fo = _fixed_owned(cfg, tl, fl.existing)
    fr = costs.cloud_fixed(cfg, tl)
    fo_total, fr_total = float(sum(fo.values())), float(sum(fr.values()))
    by_id = [{s.id: s for s in b.scenarios} for b in built]
    picks: dict[str, tuple[str, ...]] = {}
    out: list[CostScenario] = []
    for s in built[0].scenarios:
        ids = best_mix(built, fo_total, fr_total) if s.id == "hybrid" else tuple(s.id for _ in built)
        picks[s.id] = ids
        chosen = [by_id[i][sid] for i, sid in enumerate(ids)]
        label = "Hybrid (per model)" if s.id == "hybrid" else s.label
        out.append(_combine(cfg, tl, s.id, label, chosen, keys, existing, fo, fr))
    owned_value = float(sum(e * p.cfg.on_prem.hardware_usd_per_gpu * costs.resale_value(p.cfg, fl.age_years)
                            for e, p in zip(existing, parts, strict=True)))
    out = with_cash(cfg, tl, out, owned_value, fl.existing, payback_against(m_fleet.current, out))
    # a plan sells what each pool gives up (one pool may buy while another sells)
    out = [dataclasses.replace(s, sold_gpus=sum(by_id[i][sid].sold_gpus for i, sid in enumerate(picks[s.id])))
           for s in out]
    f = tl.mean_growth(growth) if growth else 1.0
    held, ok = fleet_series(m_fleet, fleet(cfg.replace("on_prem", owned_gpus=fl.existing), m_fleet),
                            m_fleet.held, m_fleet.elastic_held)
    held = held * f
    weights = np.array([b.held.mean() if b.held.size else 0.0 for b in built])
    gpus = np.array([float(b.fleet.gpus) for b in built])
    dominant = int(np.argmax(weights)) if weights.size else 0
    plans = [b.plan for b in built]
    hyb = picks["hybrid"]
    n_hybrid = sum(by_id[i][sid].owned_gpus for i, sid in enumerate(hyb))
    plan = Plan(sum(p.reserved_gpus for p in plans), sum(p.stay_reserved_gpus for p in plans),
                sum(p.n_on_prem for p in plans), n_hybrid, fl.existing,
                sum(by_id[i][sid].reserved_gpus for i, sid in enumerate(hyb)))
    wg = gpus / gpus.sum() if gpus.sum() > 0 else gpus
    watts = float(sum(w * b.watts for w, b in zip(wg, built, strict=True)))
    power = costs.PowerModel(
        float(sum(w * (b.power.idle_w if b.power else b.watts) for w, b in zip(wg, built, strict=True))),
        float(sum(w * (b.power.held_w if b.power else b.watts) for w, b in zip(wg, built, strict=True))), watts)
    sources = {b.power_source for b in built}
    block = CostBlock(
        timeline=tl, prices=_blend(built, weights), watts=watts,
        power_source=sources.pop() if len(sources) == 1 else "mixed",
        owned_marginal=float(sum(w * b.owned_marginal for w, b in zip(wg, built, strict=True))),
        fleet=fl, scenarios=tuple(out), cheapest=cheapest_of(out), sizing=built[dominant].sizing,
        break_even=_break_even(cfg, tl, built, m_fleet, fl, held, fo_total, fr_total), plan=plan, held=held,
        day=m_fleet.day[ok], pack_factor=built[dominant].pack_factor, power=power)
    return Composed(block, built, picks, fo, fr, dominant)


def compose_draws(c: Composed, parts: Sequence[Part], idx: np.ndarray, days: np.ndarray) -> CostDraws:
    """The cost bootstrap of the fleet's plans: each pool's draws (its plan held fixed) summed per fleet plan,
    the fixed costs once (the same whole days resampled in every pool)."""
    pool_draws = [cost_draws(p.cfg, p.m, b, idx, days) for p, b in zip(parts, c.blocks, strict=True)]
    fo, fr = float(sum(c.fixed_owned.values())), float(sum(c.fixed_rented.values()))
    ids, cols = [], []
    for s in c.block.scenarios:
        if s.what_if and s.id != "all-cloud":
            continue
        total = np.zeros(idx.shape[0])
        for d, sid in zip(pool_draws, c.picks[s.id], strict=True):
            total = total + d.totals[:, d.ids.index(sid)]
        total = total + (fo if s.owned_gpus > 0 else 0.0) + (fr if _rents(s) else 0.0)
        ids.append(s.id)
        cols.append(total)
    return CostDraws(tuple(ids), np.column_stack(cols))


def price_note(p: Pricing, i: int) -> str:
    """Where pool i's prices came from, for the per-model table."""
    src = p.source[i]
    cloud, hw = src["instance_usd_per_hour"], src["hardware_usd_per_gpu"]
    name = {"models": "[models] in the config", "fleet": "the fleet's [cloud] / [on_prem]", "catalogue": "catalogue",
            "assumed": "fleet default (assumed)"}
    return f"rent: {name[cloud]}; own: {name[hw]}"
