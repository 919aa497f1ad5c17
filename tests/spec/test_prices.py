"""GPU list prices: kvplan/data/gpu_prices.yaml against the excerpt of Apache Libcloud's pricing.json it
was transcribed from (tests/data/reference/libcloud-ec2-gpu-prices.json), and `--price` as typed."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from kvplan.errors import KvplanError
from kvplan.spec.gpu import gpu_catalog
from kvplan.spec.prices import list_prices, prices_for, user_price

ROOT = Path(__file__).resolve().parents[2]
STORE = yaml.safe_load((ROOT / "kvplan" / "data" / "gpu_prices.yaml").read_text())
EXCERPT = json.loads((ROOT / "tests" / "data" / "reference" / "libcloud-ec2-gpu-prices.json").read_text())
REGIONS = ("us-east-1", "us-east-2", "us-west-2")


def test_each_price_is_the_cheapest_us_region_of_its_instance_in_the_source():
    assert STORE["gpus"], "no list prices"
    for gpu, e in STORE["gpus"].items():
        regions = EXCERPT["ec2_linux"][e["instance"]]
        offered = {r: usd for r, usd in regions.items() if r in REGIONS and usd > 0}  # 0.0: not offered there
        assert e["region"] in offered, gpu
        assert e["instance_usd_per_hour"] == offered[e["region"]] == min(offered.values()), gpu


def test_the_store_names_its_source_release_and_date():
    assert EXCERPT["libcloud_version"] in STORE["source"]
    assert "2025-03-02" in STORE["source"] and EXCERPT["updated"] == 1740936978  # 2025-03-02 UTC


def test_every_priced_gpu_is_in_the_catalog_and_priced_per_gpu():
    catalog = gpu_catalog()
    prices = list_prices()
    assert set(prices) == set(STORE["gpus"]) and set(prices) <= set(catalog)
    for gpu, e in STORE["gpus"].items():
        assert prices[gpu].usd_per_hour == pytest.approx(e["instance_usd_per_hour"] / e["gpus"])
        assert e["instance"] in prices[gpu].basis and e["region"] in prices[gpu].basis
    # an 8-GPU instance costs more per hour than a 1-GPU one, and the per-GPU figure divides it
    assert STORE["gpus"]["h100-sxm-80gb"]["gpus"] == 8 and prices["h100-sxm-80gb"].usd_per_hour < 98.32
    assert prices["t4"].usd_per_hour < prices["l4"].usd_per_hour < prices["a10g"].usd_per_hour


def test_a_users_price_overrides_the_list_and_prices_an_unlisted_gpu():
    got = prices_for(["h100-sxm-80gb", "b200-sxm-180gb", "l4", "rtx-4090"],
                     {"h100-sxm-80gb": user_price("h100-sxm-80gb", "2.5"), "b200-sxm-180gb": user_price("b200", "6")})
    assert got["h100-sxm-80gb"].usd_per_hour == 2.5 and got["h100-sxm-80gb"].basis == "--price"
    assert got["b200-sxm-180gb"].usd_per_hour == 6.0
    assert got["l4"] == list_prices()["l4"]
    assert "rtx-4090" not in got  # neither listed nor given: unpriced, not zero


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "abc", "", "1e7"])
def test_a_price_that_is_not_a_positive_bounded_number_is_refused(text):
    with pytest.raises(KvplanError, match="positive number of USD per GPU-hour"):
        user_price("h100-sxm-80gb", text)


def test_prices_are_finite():
    assert all(math.isfinite(p.usd_per_hour) and p.usd_per_hour > 0 for p in list_prices().values())
