"""Time commands: `kvplan predict` (what `vllm bench serve` would print, on a GPU you don't have)
and `kvplan plan` (the configurations that meet latency SLOs). Pure Python: no torch.

The server-side flags are `kvplan estimate`'s (same names, same checks: `plan_commands`); the
workload flags are `vllm bench serve`'s.
"""
from __future__ import annotations

import json
from functools import partial
from typing import Annotated

import typer

from kvplan.cli.app import app, json_safe, make_console
from kvplan.cli.options import (
    AsJson,
    AsyncScheduling,
    BlockSize,
    Burstiness,
    Dp,
    Dtype,
    Eager,
    Ep,
    InputLen,
    KvDtype,
    MaxBatched,
    MaxConcurrency,
    MaxModelLen,
    MaxNumSeqs,
    Model,
    NumPrompts,
    OutputLen,
    Pp,
    PrefixCaching,
    Quantization,
    RangeRatio,
    Seed,
    Strict,
    Tp,
    Util,
    Version,
)
from kvplan.cli.reuse_commands import compare_routers, conversation_requests, session_requests
from kvplan.cli.server_flags import gpu_prices, load_device, plan_candidates, served
from kvplan.errors import KvplanError


def _rate(text: str) -> float:
    from kvplan.workload.datasets.random_dataset import parse_request_rate

    return parse_request_rate(text)  # its range: RandomDataset's check


def _warn_on_fallback(perf_model: str, gpu: str) -> None:
    """`auto` on a GPU the installed kernel tables do not hold: the roofline, named in a warning
    (without the kernels extra installed the output's perf-model line says so; no warning)."""
    from kvplan.perf.kernel_tables import data_root, kernels_missing

    device = load_device(gpu)
    if device is None or perf_model != "auto" or data_root() is None:
        return
    name = device.name
    why = kernels_missing(name)
    if why is not None:
        typer.echo(f"kvplan: warning: --perf-model auto times {name} by the roofline: {why}", err=True)


def _scenario_requests(path: str, block_size: int, prefix_caching: bool):
    """A kvplan scenario's requests (lengths, arrivals, concurrency) as `vllm bench serve` would send
    them; with prefix caching (vLLM's default), the prompt blocks an earlier request already had
    (shared prefixes, repeated prompts) are hits."""
    from kvplan.stress.scenario_loader import load_scenario
    from kvplan.workload.arrivals import ClosedLoop
    from kvplan.workload.workload import as_sent

    scenario = load_scenario(path)
    arrival = scenario.arrival
    return as_sent(scenario.requests(), block_size, prefix_caching), (
        arrival.concurrency if isinstance(arrival, ClosedLoop) else None)


@app.command("predict")
def predict_command(
    model: Model,
    gpu: Annotated[str, typer.Option(help="GPU from the catalog (see `kvplan gpus`).")],
    tp: Tp = 1,
    pp: Pp = 1,
    dp: Dp = 1,
    enable_expert_parallel: Ep = False,
    dtype: Dtype = "auto",
    quantization: Quantization = None,
    kv_cache_dtype: KvDtype = "auto",
    max_model_len: MaxModelLen = None,
    max_num_seqs: MaxNumSeqs = None,
    max_num_batched_tokens: MaxBatched = None,
    enable_prefix_caching: PrefixCaching = True,
    enforce_eager: Eager = False,
    vllm_version: Version = None,
    async_scheduling: AsyncScheduling = None,
    gpu_memory_utilization: Util = None,
    block_size: BlockSize = 16,
    random_input_len: InputLen = 1024,
    random_output_len: OutputLen = 128,
    random_range_ratio: RangeRatio = 0.0,
    num_prompts: NumPrompts = 1000,
    request_rate: Annotated[str, typer.Option(help="Requests/s, or inf to send all at once (--request-rate).")] = "inf",
    burstiness: Burstiness = 1.0,
    max_concurrency: MaxConcurrency = None,
    seed: Seed = 0,
    scenario: Annotated[
        str | None, typer.Option(help="A kvplan scenario (name or YAML file) instead of the random workload.")
    ] = None,
    vllm_result: Annotated[
        str | None,
        typer.Option(
            help="A result `vllm bench serve --save-result` wrote: predict that very run and print predicted vs "
                "measured (with --save-detailed its lengths and arrivals; a plain file gives its prompt count, rate "
                "and concurrency, the lengths come from --random-input-len / --random-output-len)."
        ),
    ] = None,
    sessions: Annotated[int | None, typer.Option(
        help="Conversations instead of single requests: this many sessions, each of --turns turns resending its "
             "history (the prefix cache serves what it still holds).")] = None,
    turns: Annotated[int, typer.Option(help="Turns per session (with --sessions).")] = 4,
    conversations: Annotated[str | None, typer.Option(
        help="Conversations from a ShareGPT-format JSON file instead of the synthetic ones: each user message a "
             "turn, the reply after it that turn's length; --sessions caps how many, --think-time-s and "
             "--session-rate apply.", metavar="PATH")] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="Count --conversations text with this Hugging Face tokenizer (cached; else ~4 bytes a token).")] = None,
    shared_prefix_tokens: Annotated[int, typer.Option(
        help="A system prompt / tool definitions every session starts with (with --sessions).")] = 0,
    first_turn_tokens: Annotated[int, typer.Option(help="Each session's first message (with --sessions).")] = 256,
    turn_tokens: Annotated[int, typer.Option(
        help="Each later turn's new message or tool result (with --sessions).")] = 128,
    reply_tokens: Annotated[int, typer.Option(help="Each reply's tokens (with --sessions).")] = 128,
    think_time_s: Annotated[float, typer.Option(
        help="Mean gap between a reply and the next turn (with --sessions).")] = 1.0,
    think_distribution: Annotated[str, typer.Option(
        help="Think-time gaps: exponential or constant (with --sessions).", metavar="exponential|constant")
    ] = "exponential",
    session_rate: Annotated[str, typer.Option(
        help="Sessions started per second (Poisson), or inf to start all at once (with --sessions).")] = "inf",
    kv_offloading_size: Annotated[float | None, typer.Option(
        help="A CPU tier of this many GiB (all ranks together), vLLM's --kv-offloading-size: blocks are "
             "stored there as they fill and loaded back on a GPU miss.")] = None,
    host_memory_gib: Annotated[float | None, typer.Option(
        help="The server's host memory, GiB: a --kv-offloading-size larger than it is refused.")] = None,
    kv_offloading_backend: Annotated[str, typer.Option(
        help="vLLM's --kv-offloading-backend: native (modelled) or lmcache (refused: not modelled).",
        metavar="native|lmcache")] = "native",
    replicas: Annotated[int, typer.Option(
        help="Separate vLLM servers behind a router (--router), each with its own KV pool.")] = 1,
    router: Annotated[str | None, typer.Option(
        help="How requests reach the --replicas: round-robin, least-loaded, session (a conversation stays "
             "where it started) or prefix (KV-aware: blocks to compute plus blocks held, as Dynamo's router "
             "scores); several, comma-separated, to compare them side by side.",
        metavar="round-robin|least-loaded|session|prefix")] = None,
    goodput: Annotated[list[str] | None, typer.Option(
        help="vllm bench serve's --goodput: KEY:MILLISECONDS limits (ttft, tpot, e2el), repeatable or "
             "comma-separated; adds request_goodput (requests/s meeting every limit).")] = None,
    as_json: AsJson = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Also say where the median request's TTFT goes (request latency, API server and engine "
                          "queues, its prefill steps by component) and a median decode step's time by component.",
        metavar="")] = False,
    strict: Strict = False,
    perf_model: Annotated[
        str,
        typer.Option(
            help="GPU step cost: auto (the measured kernels where they hold the GPU, else the roofline; the output "
            "says which), kernels (measured vLLM kernels from aiconfigurator-core: pip install 'kvplan[kernels]'), "
            "or roofline (datasheet and kvplan's global coefficients).",
            metavar="auto|kernels|roofline",
        ),
    ] = "auto",
) -> None:
    """What `vllm bench serve` would print for this server and workload, predicted (no GPU needed)."""
    from kvplan.perf.predict import predict as run_predict
    from kvplan.workload.datasets.random_dataset import RandomDataset

    spec, args = served(model, gpu, dtype=dtype, strict=strict, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                         data_parallel_size=dp, enable_expert_parallel=enable_expert_parallel,
                         quantization=quantization, kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len,
                         max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                         enforce_eager=enforce_eager, vllm_version=vllm_version, async_scheduling=async_scheduling,
                         gpu_memory_utilization=gpu_memory_utilization, block_size=block_size)
    bench = None
    if scenario and vllm_result:
        raise KvplanError("--scenario and --vllm-result both give the workload: choose one")
    if vllm_result:
        from kvplan.perf.bench_result import load_vllm_bench_result

        bench = load_vllm_bench_result(vllm_result)
        max_concurrency = bench.max_concurrency
        if bench.requests is not None:
            requests = bench.requests
        else:  # a plain --save-result: that run's settings, the lengths as given here
            requests = _plain_run_requests(bench.plain, random_input_len, random_output_len, random_range_ratio,
                                           max_concurrency, seed)
    elif scenario:
        requests, max_concurrency = _scenario_requests(scenario, args.block_size, enable_prefix_caching)
    elif conversations is not None:
        requests = conversation_requests(dict(
            path=conversations, tokenizer=tokenizer, num_sessions=sessions, think_time_s=think_time_s,
            think_distribution=think_distribution), _rate(session_rate), seed, spec, args, enable_prefix_caching)
    elif sessions is not None:
        requests = session_requests(dict(
            num_sessions=sessions, turns=turns, shared_prefix_tokens=shared_prefix_tokens,
            first_turn_tokens=first_turn_tokens, turn_tokens=turn_tokens, output_tokens=reply_tokens,
            think_time_s=think_time_s, think_distribution=think_distribution,
            session_rate_per_s=_rate(session_rate)), seed, spec.vocab_size, enable_prefix_caching)
    else:
        requests = RandomDataset(random_input_len, random_output_len, random_range_ratio, num_prompts,
                                 _rate(request_rate), burstiness, max_concurrency, seed).requests()
    from kvplan.results.slo import parse_goodput

    run = partial(run_predict, spec, args, requests, max_concurrency=max_concurrency, perf_model=perf_model,
                  explain=explain, prefix_caching=enable_prefix_caching, kv_offloading_size_gib=kv_offloading_size,
                  kv_offloading_backend=kv_offloading_backend, replicas=replicas, host_memory_gib=host_memory_gib,
                  goodput_ms=parse_goodput(goodput or []) or None)
    if router is not None and "," in router:
        compare_routers(run, [p.strip() for p in router.split(",")], as_json)
        return
    result = run(router=router)
    _warn_on_fallback(perf_model, gpu)
    figures = {**result.figures, "client_max_concurrency": max_concurrency}
    title = f"{spec.name} on {args.tensor_parallel_size} x {gpu}, vLLM {args.vllm_version}"
    if bench is not None and vllm_result is not None:
        _compare_with_run(figures, bench, vllm_result, title, as_json)
        return
    if as_json:
        typer.echo(json.dumps(json_safe(figures)))
        return
    from kvplan.report.predict_view import render_prediction

    render_prediction(make_console(), figures, title)


def _plain_run_requests(plain, input_len: int, output_len: int, range_ratio: float, max_concurrency: int | None,
                        seed: int) -> list:
    """A plain result's run rebuilt: its prompt count, rate and burstiness, the lengths the command
    gives; a warning when they differ from the run's own means by more than 5%."""
    from kvplan.workload.datasets.random_dataset import RandomDataset

    for flag, given, mean in (("--random-input-len", input_len, plain.mean_input_tokens),
                              ("--random-output-len", output_len, plain.mean_output_tokens)):
        if mean is not None and abs(given - mean) > 0.05 * mean:
            typer.echo(f"kvplan: warning: {flag} {given} but that run averaged {mean:,.0f} tokens; the file has no "
                       "per-request lengths (--save-detailed), so give the lengths it was run with", err=True)
    return RandomDataset(input_len, output_len, range_ratio, plain.num_prompts, plain.request_rate, plain.burstiness,
                         max_concurrency, seed).requests()


def _compare_with_run(figures: dict, bench, path: str, title: str, as_json: bool) -> None:
    """predict --vllm-result: the prediction beside what that run measured, one signed error each."""
    from kvplan.perf.bench_result import compare

    rows = compare(figures, bench.measured)
    if as_json:
        typer.echo(
            json.dumps(
                json_safe(
                    {
                        "predicted": figures,
                        "measured": bench.measured,
                        "failed_requests": bench.failed,
                        "error_pct": {k: e for k, _, _, e in rows},
                    }
                )
            )
        )
        return
    from kvplan.report.predict_view import render_comparison

    render_comparison(make_console(), rows, f"{title} vs {path}", bench.failed)


@app.command("plan")
def plan_command(
    model: Model,
    request_rate: Annotated[float, typer.Option(help="Requests/s to serve (all replicas together).")],
    slo_ttft_ms: Annotated[float, typer.Option(help="TTFT limit at --slo-percentile, ms.")],
    slo_tpot_ms: Annotated[float, typer.Option(help="TPOT limit at --slo-percentile, ms.")],
    slo_percentile: Annotated[float, typer.Option(help="Percentile the SLOs apply to.")] = 99.0,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="GPUs to consider, comma-separated (default: H100, H200, A100-80GB, L40S, L4, B200)."
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str, typer.Option("--kv-cache-dtype", help="KV dtypes to consider, comma-separated.")
    ] = "auto,fp8",
    quantization: Annotated[
        str, typer.Option("--quantization", help="Weight quantizations to consider, comma-separated (none, fp8).")
    ] = "none",
    # the names these flags had before every command spelled them alike (kept, hidden)
    gpus: Annotated[str | None, typer.Option("--gpus", hidden=True)] = None,
    kv_cache_dtypes: Annotated[str | None, typer.Option("--kv-cache-dtypes", hidden=True)] = None,
    quantizations: Annotated[str | None, typer.Option("--quantizations", hidden=True)] = None,
    price: Annotated[
        list[str] | None,
        typer.Option(
            help="GPU=USD per GPU-hour, repeatable: overrides the list price (AWS EC2 on-demand, from Apache "
            "Libcloud's "
            "pricing.json) or prices a GPU that has none."
        ),
    ] = None,
    random_input_len: InputLen = 1024,
    random_output_len: OutputLen = 128,
    random_range_ratio: RangeRatio = 0.0,
    num_prompts: NumPrompts = 200,
    burstiness: Burstiness = 1.0,
    seed: Seed = 0,
    dtype: Dtype = "auto",
    max_model_len: MaxModelLen = None,
    vllm_version: Version = None,
    async_scheduling: AsyncScheduling = None,
    gpu_memory_utilization: Util = None,
    as_json: AsJson = False,
    strict: Strict = False,
    perf_model: Annotated[
        str,
        typer.Option(
            help="GPU step cost of every candidate: roofline (the default here: a search runs hundreds of "
                 "simulations), auto (measured kernels where the extra holds the GPU) or kernels.",
            metavar="roofline|auto|kernels",
        ),
    ] = "roofline",
) -> None:
    """The GPU x TP x KV dtype x quantization configurations that meet TTFT/TPOT SLOs at a request
    rate, cheapest per hour first (GPUs without a price after, fewest GPUs first), with their
    `vllm serve` lines; exit 1 if none does."""
    from kvplan.perf.capacity import DEFAULT_GPUS, search, why_unmet
    from kvplan.perf.cost_models import PERF_MODELS
    from kvplan.results.slo import plan_slo
    from kvplan.workload.datasets.random_dataset import RandomDataset

    if perf_model not in PERF_MODELS:
        raise KvplanError(f"unknown --perf-model {perf_model!r}; choices: {', '.join(PERF_MODELS)}")
    gpus, kv_cache_dtypes = gpus or gpu, kv_cache_dtypes or kv_cache_dtype
    quantizations = quantizations or quantization
    slo = plan_slo(slo_ttft_ms, slo_tpot_ms, slo_percentile)
    # the GPU is each candidate's: the base arguments are planned on H100 only to check the flags
    spec, args = served(model, "h100-sxm-80gb", dtype=dtype, strict=strict, max_model_len=max_model_len,
                         vllm_version=vllm_version, async_scheduling=async_scheduling,
                         gpu_memory_utilization=gpu_memory_utilization)
    devices, quants = plan_candidates(gpus or ",".join(DEFAULT_GPUS), quantizations)
    workload = RandomDataset(
        random_input_len, random_output_len, random_range_ratio, num_prompts, request_rate, burstiness, None, seed
    )
    answer = search(
        spec,
        args,
        workload,
        slo,
        devices,
        kv_dtypes=[k.strip() for k in kv_cache_dtypes.split(",") if k.strip()],
        quantizations=quants,
        prices=gpu_prices(price or [], [d.name for d in devices]),
        perf_model=perf_model,
    )
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
    else:
        from kvplan.report.predict_view import render_plan

        render_plan(make_console(), answer)
    if not answer["configs"]:
        typer.echo(f"kvplan: no configuration meets the SLOs: {why_unmet(answer)}", err=True)
        raise typer.Exit(1)
