"""Refresh kvplan's GPU list prices (kvplan/data/gpu_prices.yaml) from Apache Libcloud's pricing.json.

Libcloud (PyPI apache-libcloud, Apache-2.0) ships AWS EC2's on-demand Linux prices per instance and
region in libcloud/data/pricing.json. A GPU's list price per hour is the price of the EC2 instance
that carries it divided by the instance's GPUs, in the cheapest of three US regions that lists it.
Catalog GPUs no EC2 instance carries get no price (plan says so; --price sets one).

    pip download --no-deps apache-libcloud -d /tmp/lc && unzip -o /tmp/lc/*.whl -d /tmp/lc/x
    .venv/bin/python benchmarks/gpu_prices.py /tmp/lc/x/libcloud/data/pricing.json --version 3.9.1

Writes the YAML and the excerpt tests check it against (tests/data/reference/libcloud-ec2-gpu-prices.json).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "kvplan" / "data" / "gpu_prices.yaml"
EXCERPT = REPO / "tests" / "data" / "reference" / "libcloud-ec2-gpu-prices.json"
REGIONS = ("us-east-1", "us-east-2", "us-west-2")
# catalog GPU -> (EC2 instance, its GPUs): the smallest instance of each GPU family (AWS's instance
# type pages: g4dn T4, g5 A10G, g6 L4, g6e L40S, p3dn 8x V100 32 GB, p4d 8x A100 40 GB, p4de 8x
# A100 80 GB, p5 8x H100 80 GB, p5en 8x H200 141 GB)
INSTANCES = {
    "t4": ("g4dn.xlarge", 1), "a10g": ("g5.xlarge", 1), "l4": ("g6.xlarge", 1), "l40s": ("g6e.xlarge", 1),
    "v100-sxm2-32gb": ("p3dn.24xlarge", 8), "a100-sxm4-40gb": ("p4d.24xlarge", 8),
    "a100-sxm4-80gb": ("p4de.24xlarge", 8), "h100-sxm-80gb": ("p5.48xlarge", 8), "h200-sxm-141gb": ("p5en.48xlarge", 8),
}


def cheapest(regions: dict[str, float]) -> tuple[str, float] | None:
    """The lowest non-zero price among REGIONS (0.0 in the file: not offered there), first region on a tie."""
    offered = [(regions[r], i, r) for i, r in enumerate(REGIONS) if regions.get(r)]
    return (min(offered)[2], min(offered)[0]) if offered else None


def build(pricing: dict, version: str) -> tuple[dict, dict]:
    ec2 = pricing["compute"]["ec2_linux"]
    updated = dt.datetime.fromtimestamp(pricing["updated"], dt.timezone.utc).date().isoformat()
    excerpt = {
        "libcloud_version": version,
        "updated": pricing["updated"],
        "ec2_linux": {inst: {r: ec2[inst][r] for r in REGIONS if r in ec2[inst]} for inst, _ in INSTANCES.values()},
    }
    gpus = {}
    for gpu, (inst, n) in INSTANCES.items():
        found = cheapest(ec2[inst])
        if found is None:
            continue
        region, usd = found
        gpus[gpu] = {"instance": inst, "gpus": n, "region": region, "instance_usd_per_hour": usd}
    store = {"source": f"Apache Libcloud {version} (PyPI apache-libcloud, Apache-2.0), libcloud/data/pricing.json, "
                       f"compute.ec2_linux, updated {updated}",
             "rule": "AWS EC2 on-demand Linux price of the instance, cheapest of " + ", ".join(REGIONS)
                     + ", divided by its GPUs",
             "gpus": gpus}
    return store, excerpt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pricing", type=Path, help="libcloud/data/pricing.json")
    ap.add_argument("--version", required=True, help="the apache-libcloud version it came from")
    a = ap.parse_args()
    store, excerpt = build(json.loads(a.pricing.read_text()), a.version)
    STORE.write_text("# GPU list prices per hour for `kvplan plan`. Refresh: benchmarks/gpu_prices.py\n"
                     + yaml.safe_dump(store, sort_keys=False, width=120))
    EXCERPT.write_text(json.dumps(excerpt, indent=1) + "\n")
    for gpu, e in store["gpus"].items():
        print(f"{gpu:16s} {e['instance']:15s} {e['region']:10s} ${e['instance_usd_per_hour']:8.3f} / {e['gpus']} "
              f"= ${e['instance_usd_per_hour'] / e['gpus']:.3f} per GPU-hour")


if __name__ == "__main__":
    main()
