"""Rich rendering of a vLLM capacity plan: components, the start-up log lines vLLM would print,
its error when max_model_len does not fit, the ranked fixes and the recommended command."""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvplan.plan.budget import CapacityPlan
from kvplan.plan.explain import memory_shortfall
from kvplan.plan.fixes import Fix, Recommendation
from kvplan.units import GIB


def _g(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def render_capacity(console: Console, plan: CapacityPlan, wide: bool = True) -> None:
    a = plan.args
    shortfall = memory_shortfall(plan)
    if shortfall:  # first: the reason, before the components and vLLM's own error
        console.print(Text(shortfall, style="bold red"), soft_wrap=True)
    gpu = a.gpu.display_name or a.gpu.name if a.gpu else "GPU"
    v = ".".join(map(str, plan.version))
    t = Table(title=f"vLLM {v} capacity on {gpu} (per GPU, tp {a.tensor_parallel_size} pp {a.pipeline_parallel_size})",
              header_style="bold")
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("how", style="dim")
    if a.kv_cache_memory_bytes is not None:
        t.add_row("--kv-cache-memory-bytes", _g(a.kv_cache_memory_bytes), "bypasses gpu_memory_utilization (as vLLM)")
    else:
        t.add_row(f"requested = total × {a.gpu_memory_utilization:g}", _g(plan.requested_bytes),
                  f"total {_g(plan.gpu_memory_bytes or 0)} as CUDA reports it")
    t.add_row("− weights", _g(plan.weights_bytes), "'Model loading took'; TP/PP split, rotary cache")
    t.add_row("− peak activation", _g(plan.activation_bytes),
              f"profile run: {plan.max_num_batched_tokens:,} tokens, sampler {plan.max_num_seqs:,} × vocab fp32")
    tp_buffers = " + NCCL/all-reduce buffers" if a.tensor_parallel_size > 1 else ""
    t.add_row("− non-torch", _g(plan.non_torch_bytes), "workspaces" + tp_buffers)
    graphs = "captured after the KV cache: from the headroom, not subtracted"
    if plan.cudagraph_subtracted or a.enforce_eager:
        graphs = "estimated and subtracted (v0.21+)" if plan.cudagraph_subtracted else "--enforce-eager"
    t.add_row(("− " if plan.cudagraph_subtracted else "  ") + "CUDA graphs", _g(plan.cudagraph_bytes), graphs)
    t.add_row("= available KV cache", _g(plan.available_kv_cache_bytes), "")
    bind = plan.binding_stage
    t.add_row("block (all layers of a group)", f"{plan.block_bytes / 2**20:,.3f} MiB",
              f"{a.block_size}-token page {plan.block_bytes // max(1, bind.group_size):,} B × {bind.group_size} layers"
              + (" (one KV group; kvplan's 'KV per block' spans every layer)" if len(bind.groups) > 1 else ""))
    t.add_row("num_gpu_blocks", f"{plan.num_gpu_blocks:,}", "floor(available / block), min over stages")
    if not wide:
        t.columns.pop()  # the "how" column: too narrow a console
    console.print(t)
    if plan.defaulted:
        console.print(
            f"  [dim]defaults chosen as vLLM would: {plan.defaults_rule}; max_model_len {plan.max_model_len:,}[/dim]"
        )
    for group in plan.groups:
        if len(plan.groups) > 1 or group.kind == "sliding":
            w = f" window {group.window_tokens:,}" if group.window_tokens else ""
            console.print(
                f"  [dim]{group.count} {group.kind}{w} group(s), {group.layers} layers, block {group.block_size}[/dim]"
            )
    if plan.fits:
        console.print(f"[green]Available KV cache memory: {plan.available_kv_cache_bytes / GIB:.2f} GiB[/green]")
        console.print(f"[green]GPU KV cache size: {plan.kv_cache_tokens:,} tokens[/green]")
        console.print(
            f"[green]Maximum concurrency for {plan.max_model_len:,} tokens per request: "
            f"{plan.max_concurrency:.2f}x[/green]"
        )
    else:
        console.print(Text(plan.error or "", style="bold red"), soft_wrap=True)  # vLLM's words: never markup
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)


def render_fixes(console: Console, fixes: Sequence[Fix],
                 title: str = "fixes, in the order to try them (fewest GPUs first, then least invasive)") -> None:
    if not fixes:
        return
    console.print(f"[bold]{title}[/bold], each re-planned:")
    for f in fixes:
        mark = "[green]enough[/green]" if f.fits else "[dim]not enough alone[/dim]"
        flag = f" [cyan]{f.flags}[/cyan]" if f.flags else ""
        where = f" on {f.gpus} x {f.gpu_name}" if f.gpu_name else (f" on {f.gpus} GPUs" if f.gpus > 1 else "")
        console.print(f" {f.rank}. {f.title}{flag}{where}: {f.effect} ({mark})", soft_wrap=True, highlight=False)
        if f.risk:
            console.print(f"    [yellow]risk:[/yellow] {f.risk}", soft_wrap=True)


def render_recommendation(console: Console, rec: Recommendation) -> None:
    if rec.met:
        console.print(f"[bold]recommended ({rec.target_concurrency} concurrent requests):[/bold] {rec.note}")
        console.print(f"  {rec.command}", soft_wrap=True)
    else:
        console.print(f"[bold red]no recommendation:[/bold red] {rec.note}")
