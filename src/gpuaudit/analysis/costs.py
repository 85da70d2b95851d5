"""The cost model: everything in GPU-hours. Pure functions of the config and a few measured figures.

Cloud over a horizon of M months for G GPU-hours:
    compute  = G × instance $/h ÷ GPUs per instance × mix multiplier
               (mix = spot share × spot multiplier × (1 + interruptions/h × hours lost) + reserved share ×
               reserved multiplier + the rest on-demand × 1)
    egress   = $/GB × GB/week × weeks (M × 52/12)
    managed  = once + per month × M
On-prem for N GPUs over M months (the article's total_cost_onprem, generalized):
    hardware    = $/GPU × N ÷ (amortization years × 12) × M
    power       = N × W × PUE × $/kWh × 730 h × M / 1000   (W measured unless configured)
    networking  = fixed + per GPU × N (once)
    staff       = $/month × M
    maintenance = fraction/year × $/GPU × N × M/12
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.analysis.config import Config

HOURS_PER_MONTH = 8760.0 / 12
WEEKS_PER_MONTH = 52.0 / 12


@dataclass(frozen=True)
class Rates:
    """Per-GPU-hour prices the scenarios and the sizing share."""

    cloud_list: float  # $/GPU-h on demand
    cloud_effective: float  # after the spot/reserved mix and interruption overhead
    owned_marginal: float  # one owned GPU per wall-clock hour: hardware, maintenance, power, per-GPU network
    power_w: float
    power_source: str  # "measured" or "configured"


def mix_multiplier(cfg: Config) -> float:
    c = cfg.cloud
    overhead = 1.0 + c.spot_interruptions_per_hour * c.spot_lost_hours_per_interruption
    on_demand = max(0.0, 1.0 - c.spot_share - c.reserved_share)
    return c.spot_share * c.spot_multiplier * overhead + c.reserved_share * c.reserved_multiplier + on_demand


def power_watts(cfg: Config, measured_w: float | None) -> tuple[float, str]:
    if cfg.on_prem.power_source == "measured" and measured_w is not None and measured_w > 0:
        return measured_w, "measured"
    return cfg.on_prem.fallback_watts_per_gpu, "configured"


def rates(cfg: Config, measured_w: float | None) -> Rates:
    c, o = cfg.cloud, cfg.on_prem
    cloud_list = c.instance_usd_per_hour / c.gpus_per_instance
    watts, source = power_watts(cfg, measured_w)
    horizon_h = cfg.analysis.horizon_months * HOURS_PER_MONTH
    owned = (
        o.hardware_usd_per_gpu / (o.amortization_years * 8760.0)
        + o.maintenance_fraction_per_year * o.hardware_usd_per_gpu / 8760.0
        + watts * o.pue * o.power_usd_per_kwh / 1000.0
        + o.networking_usd_per_gpu / horizon_h
    )
    return Rates(cloud_list, cloud_list * mix_multiplier(cfg), owned, watts, source)


def cloud_cost(cfg: Config, gpu_hours: float, months: float, *, fixed: bool = True) -> dict[str, float]:
    """Cost parts of buying `gpu_hours` from the cloud over `months`. `fixed`: include egress and managed
    services (they are paid whenever the cloud is used at all)."""
    c = cfg.cloud
    compute = gpu_hours * c.instance_usd_per_hour / c.gpus_per_instance * mix_multiplier(cfg)
    if not fixed:
        return {"cloud_compute": compute, "egress": 0.0, "managed_services": 0.0}
    egress = c.egress_usd_per_gb * c.egress_gb_per_week * months * WEEKS_PER_MONTH
    managed = c.managed_services_usd_once + c.managed_services_usd_per_month * months
    return {"cloud_compute": compute, "egress": egress, "managed_services": managed}


def on_prem_cost(cfg: Config, gpus: float, months: float, watts: float, *, fixed: bool = True) -> dict[str, float]:
    """Cost parts of owning `gpus` GPUs for `months` (nothing at all when gpus is 0). `fixed`: include
    the parts that do not grow with the GPU count (staff, fixed networking)."""
    o = cfg.on_prem
    if gpus <= 0:
        return {"hardware": 0.0, "power": 0.0, "networking": 0.0, "staff": 0.0, "maintenance": 0.0}
    hardware = o.hardware_usd_per_gpu * gpus
    return {
        "hardware": hardware / (o.amortization_years * 12) * months,
        "power": gpus * watts * o.pue * o.power_usd_per_kwh * HOURS_PER_MONTH * months / 1000.0,
        "networking": o.networking_usd * fixed + o.networking_usd_per_gpu * gpus,
        "staff": o.staff_usd_per_month * months * fixed,
        "maintenance": o.maintenance_fraction_per_year * hardware * months / 12,
    }


def cloud_fixed(cfg: Config, months: float) -> float:
    return sum(cloud_cost(cfg, 0.0, months).values())


def break_even_utilization(cfg: Config, gpus: float, months: float, watts: float) -> float | None:
    """Utilization u* at which renting u × (GPUs × horizon hours) GPU-hours costs the same as owning
    `gpus` GPUs for the horizon. None when there is nothing to compare (no GPUs or a free cloud)."""
    hours = gpus * months * HOURS_PER_MONTH
    per_gpu_hour = cloud_cost(cfg, 1.0, months, fixed=False)["cloud_compute"]
    if hours <= 0 or per_gpu_hour <= 0:
        return None
    owned = sum(on_prem_cost(cfg, gpus, months, watts).values())
    return max(0.0, (owned - cloud_fixed(cfg, months)) / (hours * per_gpu_hour))
