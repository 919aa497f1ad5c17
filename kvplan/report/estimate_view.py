"""Rich tables for `kvplan estimate`."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvplan.plan.estimate import Estimate, Fit
from kvplan.plan.kv import kept_tokens, layer_bytes_per_token
from kvplan.report.capacity_view import render_capacity
from kvplan.units import fmt_bytes


def _b(n: int) -> str:
    return f"{fmt_bytes(n)}  ({n:,} B)"


def _window_lines(est: Estimate) -> list[str]:
    """One line per attention kind: how many tokens each layer keeps for this request."""
    groups: dict[tuple[str, int | None], int] = {}
    for layer in est.spec.layers:
        groups[(layer.kind, layer.window_tokens)] = groups.get((layer.kind, layer.window_tokens), 0) + 1
    lines = []
    L = est.ctx_tokens
    for (kind, window), count in groups.items():
        if kind == "sliding":
            lines.append(f"{count} sliding layers (window {window:,}): keep min({L:,}, {window:,}) = {kept_tokens(kind, window, L):,} tokens")
        elif kind == "mla":
            lines.append(f"{count} MLA layers: one {est.spec.layers[0].head_dim_k}-element latent per token (no separate V, not split by TP)")
        else:
            lines.append(f"{count} {kind}-attention layers: keep all {L:,} tokens")
    return lines


def _kv_table(est: Estimate) -> Table:
    """The KV bill: per token, block, request and batch, paged and contiguous, and the weights."""
    spec, lay = est.spec, est.layout
    per_layer = layer_bytes_per_token(spec.layers[0], lay.kv_dtype, lay.tp)
    title = (f"{spec.name}" + (f" ({spec.hf_id})" if spec.hf_id else "") +
             f" · {lay.kv_dtype.name} KV · block {lay.block_size} · tp {lay.tp} pp {lay.pp}")
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", style="dim")
    heads = "1 latent" if spec.is_mla else f"{spec.num_kv_heads} KV heads × {spec.head_dim}"
    t.add_row("KV per token (all layers)", _b(lay.bytes_per_token()),
              f"{'1' if spec.is_mla else '2'} × {spec.num_layers} layers × {heads} × {lay.kv_dtype.bits / 8:g} B"
              + (" + scales" if lay.kv_dtype.scale_bytes_per_token_head else ""))
    if lay.tp > 1 or lay.pp > 1:
        t.add_row("KV per token per GPU", _b(lay.bytes_per_token_per_gpu()), f"busiest of tp {lay.tp} × pp {lay.pp}")
    t.add_row(f"KV per block ({lay.block_size} tokens, per GPU)", _b(lay.bytes_per_block()),
              f"{lay.block_size} × {per_layer:,} B × layers on the stage")
    t.add_row(f"KV per request @ {est.ctx_tokens:,} tokens (paged)", _b(est.kv_bytes_per_request),
              f"ceil({est.ctx_tokens:,}/{lay.block_size}) blocks per layer, window-capped")
    if est.kv_bytes_per_request_all_full != est.kv_bytes_per_request_exact:
        t.add_row("  if every layer were full attention", _b(est.kv_bytes_per_request_all_full), "what window-blind calculators say")
    prefix = f", {est.prefix_tokens:,}-token shared prefix" if est.prefix_tokens else ""
    t.add_row(f"KV total {est.concurrency} × {est.ctx_tokens:,} (paged{prefix})", _b(est.kv_bytes_total), "")
    t.add_row(f"KV total contiguous {est.concurrency} × max_model_len {est.max_model_len:,}", _b(est.kv_bytes_total_contiguous),
              "traditional preallocation reserves max_model_len per request")
    t.add_row("weights", _b(est.weights_bytes),
              f"{spec.params.total:,} params" + (f", {spec.quant.method}" if spec.quant.method != "none" else f" × {spec.dtype_bytes} B ({spec.dtype})"))
    return t


def _fit_table(est: Estimate, f: Fit) -> Table:
    """Whether the batch fits the GPU's KV budget, and the largest concurrency and context that do."""
    verdict = "[green]fits[/green]" if f.fits else "[bold red]does not fit[/bold red]"
    g = Table(title=f"{est.concurrency} × {est.ctx_tokens:,} tokens on {f.gpu.display_name or f.gpu.name}: {verdict}",
              show_header=True, header_style="bold")
    g.add_column("per GPU")
    g.add_column("value", justify="right")
    g.add_row("KV cache available", fmt_bytes(f.kv_available_bytes_per_gpu))
    g.add_row(f"KV needed for {est.concurrency} × {est.ctx_tokens:,}", fmt_bytes(f.kv_needed_bytes_per_gpu))
    g.add_row(f"largest concurrency at {est.ctx_tokens:,} tokens", f"{f.max_concurrency_at_ctx:,}")
    g.add_row(f"longest context at concurrency {est.concurrency}", f"{f.max_ctx_at_concurrency:,} tokens")
    return g


def _variants_table(est: Estimate) -> Table:
    v = Table(title="variants", show_header=True, header_style="bold")
    for col in ("variant", "KV / token", "KV / request", f"total × {est.concurrency}"):
        v.add_column(col, justify="right" if col != "variant" else "left")
    if est.fit:
        v.add_column("fits")
        v.add_column("max concurrency", justify="right")
    for var in est.variants:
        row = [var.label, fmt_bytes(var.kv_bytes_per_token), fmt_bytes(var.kv_bytes_per_request), fmt_bytes(var.kv_bytes_total)]
        if est.fit:
            row += ["yes" if var.fits else "no", f"{var.max_concurrency_at_ctx:,}"]
        v.add_row(*row)
    return v


def render_estimate(console: Console, est: Estimate) -> None:
    console.print(_kv_table(est))
    for line in _window_lines(est):
        console.print(f"  [dim]{line}[/dim]")
    if est.fit:
        render_capacity(console, est.fit.capacity)  # vLLM's budget: components, blocks, start-up error
        console.print(_fit_table(est, est.fit))
    console.print(_variants_table(est))
