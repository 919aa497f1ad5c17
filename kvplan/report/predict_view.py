"""Rich tables for `kvplan predict` (laid out like vLLM's "Serving Benchmark Result") and `kvplan plan`."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

SECTIONS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "",
        (
            ("Successful requests:", "completed", "d"),
            ("Maximum request concurrency:", "client_max_concurrency", "d"),
            ("Benchmark duration (s):", "duration", ".2f"),
            ("Total input tokens:", "total_input_tokens", "d"),
            ("Total generated tokens:", "total_output_tokens", "d"),
            ("Request throughput (req/s):", "request_throughput", ".2f"),
            ("Output token throughput (tok/s):", "output_throughput", ".2f"),
            ("Total Token throughput (tok/s):", "total_token_throughput", ".2f"),
        ),
    ),
    (
        "Time to First Token",
        (
            ("Mean TTFT (ms):", "mean_ttft_ms", ".2f"),
            ("Median TTFT (ms):", "median_ttft_ms", ".2f"),
            ("P99 TTFT (ms):", "p99_ttft_ms", ".2f"),
        ),
    ),
    (
        "Time per Output Token (excl. 1st token)",
        (
            ("Mean TPOT (ms):", "mean_tpot_ms", ".2f"),
            ("Median TPOT (ms):", "median_tpot_ms", ".2f"),
            ("P99 TPOT (ms):", "p99_tpot_ms", ".2f"),
        ),
    ),
    (
        "Inter-token Latency",
        (
            ("Mean ITL (ms):", "mean_itl_ms", ".2f"),
            ("Median ITL (ms):", "median_itl_ms", ".2f"),
            ("P99 ITL (ms):", "p99_itl_ms", ".2f"),
        ),
    ),
    (
        "End-to-end Latency",
        (
            ("Mean E2EL (ms):", "mean_e2el_ms", ".2f"),
            ("Median E2EL (ms):", "median_e2el_ms", ".2f"),
            ("P99 E2EL (ms):", "p99_e2el_ms", ".2f"),
        ),
    ),
    (
        "KV cache (kvplan)",
        (
            ("GPU KV blocks:", "num_gpu_blocks", "d"),
            ("KV cache tokens:", "kv_cache_tokens", "d"),
            ("Max concurrency at max_model_len:", "max_concurrency", ".2f"),
            ("Peak KV blocks used:", "peak_kv_blocks", "d"),
            ("Peak KV usage:", "peak_kv_usage", ".1%"),
            ("Peak running requests:", "peak_running_requests", "d"),
            ("Preemptions:", "num_preemptions", "d"),
        ),
    ),
    (
        "Prefix cache (kvplan)",  # only when the run had token ids to hash (`prefix_cache_figures`)
        (
            ("Prefix cache queries (tokens):", "prefix_cache_queries_tokens", "d"),
            ("Prefix cache hits (tokens):", "prefix_cache_hits_tokens", "d"),
            ("Prefix cache hit rate:", "prefix_cache_hit_rate", ".1%"),
            ("Hits after preemption (tokens):", "preempted_prefix_cache_hits_tokens", "d"),
            ("Cached blocks evicted:", "prefix_cache_evicted_blocks", "d"),
        ),
    ),
    (
        "CPU tier (kvplan)",  # --kv-offloading-size: vLLM's native OffloadingConnector
        (
            ("CPU tier blocks:", "cpu_tier_blocks", "d"),
            ("CPU tier queries (tokens):", "external_prefix_cache_queries_tokens", "d"),
            ("CPU tier hits (tokens):", "external_prefix_cache_hits_tokens", "d"),
            ("Blocks stored:", "cpu_stored_blocks", "d"),
            ("Blocks evicted from the tier:", "cpu_evicted_blocks", "d"),
            ("Load time per block (ms):", "cpu_load_ms_per_block", ".3f"),
        ),
    ),
)


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "None"
    return format(value, spec) if spec != "d" else f"{int(value)}"


def render_prediction(console: Console, figures: dict[str, Any], title: str) -> None:
    table = Table(title=f"Serving Benchmark Result (predicted: {title})", show_header=False, box=None, pad_edge=False)
    table.add_column(min_width=40)
    table.add_column(justify="right", min_width=12)
    for section, rows in SECTIONS:
        if not any(key in figures for _, key, _ in rows):
            continue
        if section:
            table.add_row(f"[bold]{section.center(50, '-')}[/bold]", "")
        for label, key, spec in rows:
            table.add_row(label, _fmt(figures.get(key), spec))
    console.print(table)
    if figures.get("perf_model"):
        console.print(f"[dim]perf model: {figures['perf_model']}[/dim]", soft_wrap=True, highlight=False)
    for op, source in (figures.get("step_cost_sources") or {}).items():  # what each op was timed from
        console.print(f"[dim]step cost, {op}: {source}[/dim]", soft_wrap=True, highlight=False)
    if figures.get("kv_offloading_note"):
        console.print(f"[dim]kv offloading: {figures['kv_offloading_note']}[/dim]", soft_wrap=True, highlight=False)
    if figures.get("scheduling"):
        console.print(f"[dim]scheduling: {figures['scheduling']}[/dim]", soft_wrap=True, highlight=False)
    if "explain" in figures:
        render_explanation(console, figures["explain"])


def render_explanation(console: Console, found: dict[str, Any] | None) -> None:
    """predict --explain: the median request's TTFT by part, its prefill steps and a decode step by component."""
    if found is None:
        console.print("explain: no request sampled a token in the simulation")
        return
    t = Table(title=f"Where the median TTFT goes (request {found['request_index']}, {found['prompt_tokens']:,} "
                    f"prompt tokens, {found['ttft_ms']:.2f} ms predicted)", show_header=True, header_style="bold")
    t.add_column("part")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    total = found["ttft_ms"] or 1.0
    for name, ms in found["ttft_parts_ms"].items():
        t.add_row(name, f"{ms:.2f}", f"{100 * ms / total:.0f}%")
    console.print(t)
    steps = Table(title=f"Its {found['prefill_steps']} prefill step(s), and a median decode step, by component",
                  header_style="bold")
    steps.add_column("component")
    steps.add_column("prefill steps, ms", justify="right")
    decode = found.get("decode_step") or {}
    steps.add_column(f"decode step ({decode.get('num_seqs', 0)} seqs), ms", justify="right")
    decode_parts = decode.get("components_ms", {})
    for name in dict.fromkeys([*found["prefill_components_ms"], *decode_parts]):
        steps.add_row(name, f"{found['prefill_components_ms'].get(name, 0.0):.3f}",
                      f"{decode_parts[name]:.3f}" if name in decode_parts else "")
    console.print(steps)


def render_plan(console: Console, answer: dict[str, Any]) -> None:
    """The configurations that meet the SLOs, cheapest per hour first."""
    console.print(f"[dim]step cost: --perf-model {answer.get('perf_model', 'roofline')}[/dim]", highlight=False)
    w = answer["workload"]
    table = Table(title=(f"Configurations for {answer['model']} at {w['request_rate']} req/s "
                         f"({w['random_input_len']} in / {w['random_output_len']} out); "
                         f"P{answer['slo']['percentile']:g} TTFT <= {answer['slo']['ttft_ms']} ms, "
                         f"TPOT <= {answer['slo']['tpot_ms']} ms"))
    for col in (
        "GPU",
        "tp (x dp)",
        "weights",
        "KV",
        "replicas",
        "GPUs",
        "goodput req/s per replica",
        "TTFT ms",
        "TPOT ms",
        "$/h, all GPUs",
    ):
        table.add_column(col, justify="right" if col not in ("GPU", "weights", "KV") else "left")
    for c in answer["configs"]:
        width = str(c["tp"]) + (
            f" x dp{c['dp']}" + (" EP" if c.get("expert_parallel") else "") if c.get("dp", 1) > 1 else ""
        )
        table.add_row(
            c["gpu"],
            width,
            c["quantization"] or "auto",
            c["kv_cache_dtype"],
            str(c["replicas"]),
            str(c["total_gpus"]),
            f"{c['goodput_req_per_s']:.1f}",
            f"{c['ttft_ms']:.0f}",
            f"{c['tpot_ms']:.1f}",
            "-" if c.get("usd_per_hour") is None else f"{c['usd_per_hour']:.2f}",
        )
    console.print(table)
    console.print(
        "goodput: the most requests/s one replica (one vllm serve, its data-parallel ranks included) serves "
        "within the SLOs; TTFT and TPOT: predicted at the requested rate, spread over the replicas",
        highlight=False,
    )
    priced = {c["gpu"]: c for c in answer["configs"]}
    for dataset in sorted({c["usd_per_hour_dataset"] for c in priced.values() if c.get("usd_per_hour_dataset")}):
        console.print(f"[dim]$/h list prices: {dataset}[/dim]", soft_wrap=True, highlight=False)
    for gpu, c in priced.items():  # where each GPU's price comes from, or that it has none
        how = (
            f"${c['usd_per_gpu_hour']:.3f} per GPU-hour, {c['usd_per_hour_source']}"
            if c.get("usd_per_hour_source")
            else f"no list price (no AWS EC2 instance carries it); --price {gpu}=USD ranks it by cost"
        )
        console.print(f"[dim]$/h {gpu}: {how}[/dim]", soft_wrap=True, highlight=False)
    for c in answer["configs"]:
        console.print(
            f"[dim]{c['gpu']} x{c['total_gpus']} ({c['replicas']} replica(s) of {c['total_gpus'] // c['replicas']} "
            "GPU(s)):[/dim] "
            f"{c['vllm_serve']}",
            soft_wrap=True,
            highlight=False,
        )


def render_comparison(
    console: Console, rows: list[tuple[str, float, float, float | None]], title: str, failed: int
) -> None:
    """predict --vllm-result: vLLM's keys, predicted, measured, and the signed error."""
    table = Table(title=f"predicted vs measured: {title}")
    for col in ("metric", "predicted", "measured", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for key, predicted, measured, error in rows:
        table.add_row(key, f"{predicted:,.2f}", f"{measured:,.2f}", "—" if error is None else f"{error:+.1f}%")
    console.print(table)
    console.print("error = (predicted - measured) / measured: + means kvplan predicted more (slower for a latency, "
                  "faster for a throughput)", highlight=False)
    if failed:
        console.print(f"{failed} failed requests of that run are left out of the prediction", highlight=False)


def render_router_comparison(console: Console, rows: list[dict[str, Any]]) -> None:
    """`predict --router a,b,...`: one row per routing policy (predicted)."""
    table = Table(title="Routers compared (predicted)", header_style="bold")
    for name in ("router", "requests per replica", "prefix hit rate", "median TTFT ms", "P99 TTFT ms",
                 "median TPOT ms", "goodput req/s", "preemptions"):
        table.add_column(name, justify="left" if name == "router" else "right")
    for r in rows:
        goodput = r.get("request_goodput")
        table.add_row(str(r["router"]), " / ".join(str(n) for n in r["requests_per_replica"] or ()),
                      f"{r['prefix_cache_hit_rate']:.1%}", _fmt(r["median_ttft_ms"], ".1f"),
                      _fmt(r["p99_ttft_ms"], ".1f"), _fmt(r["median_tpot_ms"], ".2f"),
                      "-" if goodput is None else f"{goodput:.2f}", str(r["num_preemptions"]))
    console.print(table)
    if all(r.get("request_goodput") is None for r in rows):
        console.print("[dim]goodput: give --goodput ttft:MS,tpot:MS to count requests meeting them[/dim]")


def render_session_plan(console: Console, answer: dict[str, Any]) -> None:
    """`plan-sessions`: the answer, its tier curve and every configuration tried (predicted)."""
    slo = answer["slo"]
    best = answer["best"]
    if best is None:
        console.print(f"no configuration tried meets P99 TTFT <= {slo['ttft_ms']:g} ms and TPOT <= "
                      f"{slo['tpot_ms']:g} ms (predicted); the trials are below")
    else:
        cost = "unpriced" if best["usd_per_hour"] is None else f"${best['usd_per_hour']:.2f}/h"
        console.print(f"[bold]{best['replicas']} x {best['gpu']} TP{best['tp']}, CPU tier {best['tier_gib']:g} GiB, "
                      f"router {answer['router']}[/bold] ({cost}; predicted P99 TTFT {best['p99_ttft_ms']:.0f} ms, "
                      f"TPOT {best['p99_tpot_ms']:.1f} ms)", highlight=False)
        console.print(answer["vllm_serve"], soft_wrap=True, highlight=False, markup=False)
        if answer.get("note"):
            console.print(f"[dim]{answer['note']}[/dim]")
    table = Table(title="Trials (predicted)", header_style="bold")
    for name in ("GPU", "TP", "CPU tier GiB", "replicas", "P99 TTFT ms", "P99 TPOT ms", "GPU hit rate",
                 "with CPU tier", "meets", "$/h"):
        table.add_column(name, justify="left" if name == "GPU" else "right")
    for t in answer["trials"]:
        if t.get("stopped"):  # a certain miss: simulated only until it was certain
            figures = ["over", "-", "-", "-"]
        else:
            figures = [_fmt(t["p99_ttft_ms"], ".0f"), _fmt(t["p99_tpot_ms"], ".1f"), f"{t['hit_rate']:.1%}",
                       f"{t['total_hit_rate']:.1%}"]
        table.add_row(t["gpu"], str(t["tp"]), f"{t['tier_gib']:g}", str(t["replicas"]), *figures,
                      "yes" if t["meets"] else "no", "-" if t["usd_per_hour"] is None else f"{t['usd_per_hour']:.2f}")
    console.print(table)
    if any(t.get("stopped") for t in answer["trials"]):
        console.print("[dim]over: the trial stopped once more requests were over a limit than P99 allows; its "
                      "figures were not simulated to the end[/dim]")
