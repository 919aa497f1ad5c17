"""Reuse workloads on the command line: conversations (`--sessions`, `--conversations`) and router
comparisons for `predict`, and `kvplan plan-sessions` (the cheapest GPU x TP x CPU tier x replicas
for a conversation workload, with the tier curve as a plot)."""
from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from kvplan.cli.app import app, json_safe, make_console
from kvplan.cli.options import AsJson, MaxModelLen, Model, Seed, Strict, Util, Version
from kvplan.errors import KvplanError


def compare_routers(run: Any, policies: list[str], as_json: bool) -> None:
    """One prediction per router policy, side by side."""
    rows = []
    for policy in policies:
        figures = run(router=policy).figures
        rows.append({k: figures.get(k) for k in ROUTER_KEYS})
    if as_json:
        typer.echo(json.dumps(json_safe({"routers": rows})))
        return
    from kvplan.report.predict_view import render_router_comparison

    render_router_comparison(make_console(), rows)


ROUTER_KEYS = ("router", "replicas", "requests_per_replica", "prefix_cache_hit_rate", "prefix_cache_hits_tokens",
               "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "request_throughput", "request_goodput",
               "num_preemptions")


def _validated(model: Any, knobs: dict, flags: dict[str, str]) -> Any:
    """`model` from the command's knobs; a bad one is one line naming its flag and value."""
    from pydantic import ValidationError

    from kvplan.validation import first_error

    try:
        return model.model_validate(knobs, strict=False)
    except ValidationError as exc:
        loc, text = first_error(exc)
        where = str(loc[0]) if loc else ""
        flag = flags.get(where, "--" + where.replace("_", "-"))
        raise KvplanError(f"{flag} {knobs.get(where)!r}: {text}") from None


def conversation_requests(knobs: dict, rate: float, seed: int, spec: Any, args: Any, prefix_caching: bool) -> list:
    """`--conversations FILE`'s turns, conversations started by a Poisson process at `rate` per
    second (inf: all at 0)."""
    import math

    from numpy.random import PCG64, Generator, SeedSequence

    from kvplan.plan.budget import plan_capacity
    from kvplan.workload.arrivals import PoissonArrival
    from kvplan.workload.conversations import Conversations

    if not prefix_caching:
        raise KvplanError("--conversations needs prefix caching (a later turn's history is what it would reuse)")
    conv = _validated(Conversations, knobs, {"num_sessions": "--sessions", "path": "--conversations"})
    starts = None if math.isinf(rate) else PoissonArrival(rate_per_s=rate).times(Generator(PCG64(SeedSequence(seed))))
    notes: list[str] = []
    requests = conv.requests(seed, spec.vocab_size, plan_capacity(spec, args).max_model_len, starts, notes)
    for note in notes:
        typer.echo(f"kvplan: note: {note}", err=True)
    return requests


def session_requests(knobs: dict, seed: int, vocab_size: int, prefix_caching: bool) -> list:
    """The synthetic conversations `--sessions` asks for; a bad knob is one line naming it."""
    from kvplan.workload.sessions import Sessions

    if not prefix_caching:
        raise KvplanError("--sessions needs prefix caching (a later turn's history is what it would reuse); "
                          "drop --no-enable-prefix-caching")
    if knobs["session_rate_per_s"] is not None and knobs["session_rate_per_s"] == float("inf"):
        knobs["session_rate_per_s"] = None
    flags = {"num_sessions": "--sessions", "output_tokens": "--reply-tokens", "session_rate_per_s": "--session-rate"}
    return _validated(Sessions, knobs, flags).requests(seed, vocab_size)


def _floats(text: str, flag: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise KvplanError(f"{flag} {text!r}: comma-separated numbers") from None
    if not values or any(not 0 <= v <= 2**20 for v in values):
        raise KvplanError(f"{flag} {text!r}: comma-separated sizes in GiB, each in [0, 1048576] (0: no tier)")
    return values


@app.command("plan-sessions")
def plan_sessions_command(
    model: Model,
    slo_ttft_ms: Annotated[float, typer.Option(help="P99 TTFT limit, ms.")],
    slo_tpot_ms: Annotated[float, typer.Option(help="P99 TPOT limit, ms.")],
    sessions: Annotated[int, typer.Option(help="Conversations to serve.")] = 1000,
    turns: Annotated[int, typer.Option(help="Turns per conversation.")] = 4,
    shared_prefix_tokens: Annotated[int, typer.Option(help="A system prompt / tool block every one starts with.")] = 0,
    first_turn_tokens: Annotated[int, typer.Option(help="Each conversation's first message.")] = 256,
    turn_tokens: Annotated[int, typer.Option(help="Each later message or tool result.")] = 128,
    reply_tokens: Annotated[int, typer.Option(help="Each reply.")] = 128,
    think_time_s: Annotated[float, typer.Option(help="Mean gap between a reply and the next turn.")] = 1.0,
    session_rate: Annotated[float, typer.Option(help="Conversations started per second (Poisson).")] = 1.0,
    gpu: Annotated[str, typer.Option(help="GPUs to consider, comma-separated.")] = "h100",
    tp: Annotated[str, typer.Option(help="Tensor-parallel sizes to consider, comma-separated.")] = "1",
    kv_offloading_size: Annotated[str, typer.Option(
        help="CPU tier sizes to consider, GiB, comma-separated (0: none).")] = "0,16,64",
    router: Annotated[str, typer.Option(help="The router in front of 2+ replicas.",
                                        metavar="round-robin|least-loaded|session|prefix")] = "prefix",
    max_replicas: Annotated[int, typer.Option(help="Most replicas to try per configuration.")] = 8,
    plot: Annotated[str | None, typer.Option(
        help="Write the hit rate and P99 TTFT against CPU tier size, for the answer's GPU, TP and replicas, "
             "as a PNG here.", metavar="PATH")] = None,
    price: Annotated[list[str] | None, typer.Option(help="GPU=USD per GPU-hour, repeatable.")] = None,
    max_model_len: MaxModelLen = None,
    gpu_memory_utilization: Util = None,
    vllm_version: Version = None,
    seed: Seed = 0,
    as_json: AsJson = False,
    strict: Strict = False,
) -> None:
    """The cheapest GPU x TP x CPU tier x replicas that serves a conversation workload within P99
    TTFT and TPOT limits (predicted), with its `vllm serve` line and what host memory buys."""
    from kvplan.cli.server_flags import gpu_prices, plan_candidates, served
    from kvplan.perf.route_rule import check_router
    from kvplan.perf.session_plan import plan_sessions
    from kvplan.results.slo import plan_slo

    slo = plan_slo(slo_ttft_ms, slo_tpot_ms, 99.0)
    check_router(router)
    if not 1 <= max_replicas <= 64:
        raise KvplanError(f"--max-replicas {max_replicas}: give 1 to 64")
    try:
        tps = [int(x) for x in tp.split(",") if x.strip()]
    except ValueError:
        raise KvplanError(f"--tp {tp!r}: comma-separated tensor-parallel sizes") from None
    if not tps or any(not 1 <= t <= 64 for t in tps):
        raise KvplanError(f"--tp {tp!r}: comma-separated tensor-parallel sizes in 1..64")
    tiers = _floats(kv_offloading_size, "--kv-offloading-size")
    spec, args = served(model, "h100-sxm-80gb", dtype="auto", strict=strict, max_model_len=max_model_len,
                         vllm_version=vllm_version, gpu_memory_utilization=gpu_memory_utilization)
    devices, _ = plan_candidates(gpu, "none")
    requests = session_requests(dict(
        num_sessions=sessions, turns=turns, shared_prefix_tokens=shared_prefix_tokens,
        first_turn_tokens=first_turn_tokens, turn_tokens=turn_tokens, output_tokens=reply_tokens,
        think_time_s=think_time_s, think_distribution="exponential", session_rate_per_s=session_rate),
        seed, spec.vocab_size, True)
    answer = plan_sessions(spec, args, requests, slo, devices, tps, tiers, router, max_replicas,
                           gpu_prices(price or [], [d.name for d in devices]))
    answer["model"] = spec.name
    if plot and answer["curve"]:
        _plot_curve(answer, plot)
    if as_json:
        typer.echo(json.dumps(json_safe(answer)))
    else:
        from kvplan.report.predict_view import render_session_plan

        render_session_plan(make_console(), answer)
    if answer["best"] is None:
        raise typer.Exit(1)


def _plot_curve(answer: dict[str, Any], path: str) -> None:
    """Hit rate and P99 TTFT against CPU tier size (PNG, written atomically)."""
    import io

    from matplotlib.figure import Figure

    from kvplan.files import check_output_path, write_files

    target = check_output_path(path, flag="--plot")
    curve = answer["curve"]
    sizes = [c["tier_gib"] for c in curve]
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ax.plot(sizes, [c["total_hit_rate"] * 100 for c in curve], marker="o", color="#1f77b4", label="GPU + CPU tier")
    ax.plot(sizes, [c["hit_rate"] * 100 for c in curve], marker="o", color="#1f77b4", linestyle=":", label="GPU")
    ax.set_xlabel("CPU tier (GiB)")
    ax.set_ylabel("prompt tokens served from cache (%)", color="#1f77b4")
    ax.legend(loc="lower right", fontsize=8)
    right = ax.twinx()
    right.plot(sizes, [c["p99_ttft_ms"] for c in curve], marker="s", color="#d62728")
    right.set_ylabel("P99 TTFT (ms), predicted", color="#d62728")
    best = answer["best"]
    ax.set_title(f"{answer['model']}: {best['replicas']} x {best['gpu']} TP{best['tp']}, router {answer['router']}",
                 fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_files({target: buf.getvalue()})
