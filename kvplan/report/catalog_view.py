"""Rich tables for `kvplan gpus` and `kvplan profiles`."""
from __future__ import annotations

import json
import re

from rich.console import Console
from rich.table import Table

from kvplan.plan.kv import KvLayout
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.model import ModelSpec
from kvplan.spec.prices import GpuPrice
from kvplan.units import GIB, fmt_bytes


def public_source(text: str, bundled_file: str) -> str:
    """A provenance note for the screen: one that cites files only kvplan's authors have (the
    reference set it was built from) becomes the bundled file the user does have."""
    text = re.sub(r"\s*\([^()]*reference set[^()]*\)", "", text or "")  # a parenthesised citation goes
    lowered = text.lower()
    if not text or "reference set" in lowered or "../" in lowered or "seed" in lowered:
        return f"bundled with kvplan ({bundled_file})"
    return text


def _n(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "—" if x is None else fmt.format(x)


def render_gpus(console: Console, gpus: list[GpuSpec], prices: dict[str, GpuPrice]) -> None:
    t = Table(title="GPU catalog (bundled)", header_style="bold")
    for col in (
        "name",
        "aliases",
        "marketed GB",
        "CUDA total GiB",
        "BW GB/s",
        "BF16 TFLOPS",
        "FP8 TFLOPS",
        "$/GPU-h (list)",
        "interconnect",
    ):
        t.add_column(col)
    for g in gpus:
        price = prices.get(g.name)
        t.add_row(g.name, ", ".join(g.aliases), _n(g.memory_marketed_gb, "{:g}"),
                  _n(g.cuda_total_bytes / GIB if g.cuda_total_bytes else None, "{:.2f}"),
                  _n(g.memory_bandwidth_gbps), _n(g.bf16_dense_tflops, "{:g}"), _n(g.fp8_dense_tflops, "{:g}"),
                  _n(price.usd_per_hour if price else None, "{:.2f}"), g.interconnect[:40])
    console.print(t)
    datasets = sorted({p.dataset for p in prices.values()})
    if datasets:
        console.print(f"$/GPU-h (list): an AWS EC2 instance's on-demand price / its GPUs; {'; '.join(datasets)}. "
                      "`kvplan gpus --json` names each instance and region; `kvplan plan --price GPU=USD` overrides.",
                      highlight=False)


def render_profiles(console: Console, specs: list[ModelSpec]) -> None:
    t = Table(title="model profiles (bundled)", header_style="bold")
    for col in ("name", "hf id", "layers", "attention", "KV heads × dim", "KV/token (auto)", "params"):
        t.add_column(col)
    for s in specs:
        kinds = ", ".join(f"{n} {k}" for k, n in s.attention_kinds.items())
        heads = f"latent {s.layers[0].head_dim_k}" if s.is_mla else f"{s.num_kv_heads} × {s.head_dim}"
        t.add_row(s.name, s.hf_id or "", str(s.num_layers), kinds, heads,
                  fmt_bytes(KvLayout.of(s).bytes_per_token()), f"{s.params.total / 1e9:.2f} B")
    console.print(t)


def render_profile(console: Console, s: ModelSpec) -> None:
    t = Table(title=s.name, show_header=False)
    t.add_column("field")
    t.add_column("value")
    rows = {
        "hf_id": s.hf_id,
        "aliases": ", ".join(s.aliases),
        "source": public_source(s.source, f"profiles/{s.name}.yaml"),
        "architecture": s.architecture,
        "layers": s.num_layers,
        "attention": ", ".join(f"{n} {k}" for k, n in s.attention_kinds.items()),
        "windows": ", ".join(sorted({str(ln.window_tokens) for ln in s.layers if ln.window_tokens})) or "none",
        "hidden / heads / kv heads / head_dim": (
            f"{s.hidden_size} / {s.num_attention_heads} / {s.num_kv_heads} / {s.head_dim}"
        ),
        "vocab / max_position_embeddings": f"{s.vocab_size} / {s.max_position_embeddings}",
        "dtype (served)": s.dtype
        + (f" (config: {s.config_dtype})" if s.config_dtype and s.config_dtype != s.dtype else ""),
        "parameters": f"{s.params.total:,} (active {s.params.active:,})",
        "weight quantization": s.quant.method,
        "weights": fmt_bytes(s.weights_bytes),
        "KV per token (auto dtype)": f"{KvLayout.of(s).bytes_per_token():,} B",
    }
    for k, v in rows.items():
        t.add_row(k, str(v))
    console.print(t)
    console.print_json(json.dumps(s.config))
