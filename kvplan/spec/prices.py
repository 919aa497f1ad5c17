"""GPU list prices per hour (kvplan/data/gpu_prices.yaml): the AWS EC2 on-demand price of the instance
carrying a GPU, divided by its GPUs, as transcribed from Apache Libcloud's pricing.json (the YAML
names the release and date; benchmarks/gpu_prices.py refreshes it). GPUs no EC2 instance carries
have none: `kvplan plan --price GPU=USD` gives one, and overrides a list price."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from kvplan.errors import KvplanError

MAX_USD_PER_GPU_HOUR = 1e6  # bounds a plan's $/h (x replicas x tp) well inside a float


@dataclass(frozen=True)
class GpuPrice:
    usd_per_hour: float  # one GPU
    basis: str  # how: the instance and region, or "--price"
    dataset: str = ""  # the data it was read from


@lru_cache(maxsize=1)
def list_prices() -> dict[str, GpuPrice]:
    """Catalog GPU name -> its list price."""
    import yaml

    from kvplan.spec.catalog_files import bundled_dir

    data = yaml.safe_load((bundled_dir() / "gpu_prices.yaml").read_text())
    return {gpu: GpuPrice(e["instance_usd_per_hour"] / e["gpus"],
                          f"list: AWS EC2 {e['instance']} on-demand, {e['region']}, ${e['instance_usd_per_hour']:g}/h "
                          f"/ {e['gpus']} GPU{'s' if e['gpus'] > 1 else ''}", data["source"])
            for gpu, e in data["gpus"].items()}


def user_price(gpu: str, text: str) -> GpuPrice:
    """`--price GPU=USD` as typed: a finite, positive number of dollars per GPU-hour."""
    try:
        usd = float(text)
    except ValueError:
        usd = math.nan
    if not (math.isfinite(usd) and 0 < usd <= MAX_USD_PER_GPU_HOUR):
        raise KvplanError(f"--price {gpu}={text}: the price must be a positive number of USD per GPU-hour, at most "
                          f"{MAX_USD_PER_GPU_HOUR:,.0f} (e.g. h100=2.5)")
    return GpuPrice(usd, "--price")


def prices_for(gpus: list[str], overrides: dict[str, GpuPrice]) -> dict[str, GpuPrice]:
    """Each GPU's price: the user's, else the list price; GPUs with neither are left out."""
    known = list_prices()
    return {g: overrides.get(g) or known[g] for g in gpus if g in overrides or g in known}
