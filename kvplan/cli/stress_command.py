"""`kvplan stress`: the use case, from flags to files. Run the scenario (`kvplan.stress.stress_run`),
print the comparison (`kvplan.report.stress_view`), then write the result files and report.html
together (all or none). Heavy imports stay inside the functions: `--help` loads none of them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvplan.cli.app import app, json_safe, make_console
from kvplan.cli.options import Threads
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from rich.console import Console

    from kvplan.stress.stress_run import StressOptions, StressRun


LOAD = "Load (vllm bench serve's flags)"


def _rate(text: str | None) -> float | None:
    from kvplan.workload.datasets.random_dataset import parse_request_rate

    return None if text is None else parse_request_rate(text)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             epilog="Every other flag of vLLM 0.19's `vllm bench serve` is taken too, with vLLM's meaning: --base-url, "
                    "--host, --port, --endpoint, --backend, --header, --input-len, --output-len, --temperature, "
                    "--top-p, --top-k, --min-p, --frequency-penalty, --presence-penalty, --repetition-penalty, "
                    "--logprobs, --extra-body, --ignore-eos, --lora-modules, --lora-assignment, --request-id-prefix, "
                    "--num-warmups, --ramp-up-strategy, --ramp-up-start-rps, --ramp-up-end-rps, "
                    "--ready-check-timeout-sec, --insecure, --disable-tqdm, --label, --metadata, --result-dir, "
                    "--result-filename, --append-result, --save-detailed, --percentile-metrics, "
                    "--metric-percentiles, --goodput, --prefix-repetition-*, --sonnet-*, --disable-shuffle, "
                    "--no-oversample, --tokenizer-mode, --trust-remote-code, --skip-tokenizer-init, "
                    "--skip-chat-template; those for audio, images, reranking, profiling, beam search and vLLM's "
                    "plots are refused in one line saying why.")
def stress(
    ctx: typer.Context,
    scenario: Annotated[
        Path | None,
        typer.Option(
            "--scenario",
            "-s",
            help="A scenario YAML file, or a bundled scenario by name (`kvplan scenarios` lists them); or build one "
                "with --model and the load flags below.",
        ),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Output folder (default: a new reports/<scenario>/<UTC time>, linked as reports/<scenario>/latest).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the run already in --out.", metavar="")] = False,
    allocator: Annotated[
        str, typer.Option(help="paged, contiguous, or both (same KV memory, side by side).")
    ] = "paged",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.", metavar="")] = False,
    replicas: Annotated[int | None, typer.Option(
        help="The bundled engine as N replicas, each with its own KV pool, behind --router (the scenario's "
             "replicas).")] = None,
    router: Annotated[str | None, typer.Option(
        help="How requests reach the --replicas: round-robin, least-loaded, session or prefix (KV-aware).")] = None,
    calibration: Annotated[
        Path | None, typer.Option(help="Cost-model file from `kvplan calibrate` (default: profiles/calibration/).")
    ] = None,
    recalibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate",
            help="Calibrate the cost model right before the run (same machine state), and store it.",
            metavar="",
        ),
    ] = False,
    target: Annotated[str | None, typer.Option(help="An OpenAI-compatible server, e.g. http://127.0.0.1:8000.")] = None,
    api: Annotated[str, typer.Option(help="With --target: completions or chat.")] = "completions",
    served_model_name: Annotated[
        str | None, typer.Option(help="With --target: the model name the server serves.")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="With --target: environment variable holding the API key.")
    ] = None,
    timeout_s: Annotated[float, typer.Option(
        "--timeout-s", help="With --target: the longest a request may wait for its first or next content token; "
                            "the whole request gets (max_tokens + 2) x this, every probe min(this, 10 s).")] = 120.0,
    threads: Threads = None,
    workers: Annotated[int, typer.Option(
        "--workers", help="With --target: client processes driving the server (one merged result; percentiles "
                          "from every sample).")] = 1,
    server_kind: Annotated[
        str,
        typer.Option(
            "--server-kind", help="With --target: auto (ask the server what it accepts), vllm, sglang, tgi or openai."
        ),
    ] = "auto",
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="With --target: the server's GPU (see `kvplan gpus`), so the prediction has latencies (kvplan "
                "predict's GPU model).",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="With --target: the server's tokenizer (a local directory or a repo in the Hugging Face cache; "
                "offline) for text prompts of the scenario's exact length.",
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="kvplan, or vllm: also write result.vllm.json with the keys and per-request arrays of `vllm bench "
                "serve --save-result`.",
        ),
    ] = "kvplan",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object (files written, verdicts, measured and predicted metrics) on stdout; the "
                "tables go to stderr.",
            metavar="",
        ),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="The model (profile, alias, config.json or directory); with --scenario it replaces the scenario's.",
            rich_help_panel=LOAD,
        ),
    ] = None,
    dataset_name: Annotated[
        str | None,
        typer.Option(
            help="random (default), sharegpt, custom (JSONL/CSV of prompt or input_len, output_len), burstgpt, "
                 "sonnet (vLLM's poem lines; needs --tokenizer) or prefix_repetition.",
            rich_help_panel=LOAD,
        ),
    ] = None,
    dataset_path: Annotated[
        str | None, typer.Option(help="The dataset file (sharegpt, custom, burstgpt).", rich_help_panel=LOAD)
    ] = None,
    num_prompts: Annotated[
        int | None, typer.Option(help="Requests to send (default 1000, as vLLM).", rich_help_panel=LOAD)
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Requests/s (Poisson), or inf to send all at once (default).", rich_help_panel=LOAD),
    ] = None,
    burstiness: Annotated[
        float | None, typer.Option(help="Gamma shape of arrival gaps; 1 is Poisson.", rich_help_panel=LOAD)
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="At most this many requests in flight.", rich_help_panel=LOAD)
    ] = None,
    random_input_len: Annotated[
        int | None, typer.Option(help="Prompt tokens (random dataset; default 1024).", rich_help_panel=LOAD)
    ] = None,
    random_output_len: Annotated[
        int | None, typer.Option(help="Output tokens (random dataset; default 128).", rich_help_panel=LOAD)
    ] = None,
    random_range_ratio: Annotated[
        float | None, typer.Option(help="Lengths uniform in len x [1 - r, 1 + r].", rich_help_panel=LOAD)
    ] = None,
    random_prefix_len: Annotated[
        int | None,
        typer.Option(help="A shared prefix of this many tokens before each random prompt.", rich_help_panel=LOAD),
    ] = None,
    sharegpt_output_len: Annotated[
        int | None,
        typer.Option(help="Fixed output tokens instead of each ShareGPT reply's length.", rich_help_panel=LOAD),
    ] = None,
    custom_output_len: Annotated[
        int | None,
        typer.Option(help="Output tokens of custom rows without output_len (default 256).", rich_help_panel=LOAD),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of lengths, dataset order and arrivals.", rich_help_panel=LOAD)
    ] = None,
    save_result: Annotated[
        bool,
        typer.Option(
            "--save-result",
            help="Also write result.vllm.json (same as --format vllm).",
            metavar="",
            rich_help_panel=LOAD,
        ),
    ] = False,
) -> None:
    """Run a scenario on the bundled engine (or a server) and compare with the prediction made first.

    The load is a scenario file, or `vllm bench serve`'s flags: `kvplan stress --target URL --model M
    --dataset-name sharegpt --dataset-path f.json --request-rate 4 --num-prompts 500`."""
    from kvplan.stress.bench_flags import BenchFlags
    from kvplan.stress.bench_serve_flags import parse_bench_extras
    from kvplan.stress.stress_run import StressOptions

    extras = parse_bench_extras(list(ctx.args))
    for note in extras.no_effect:
        typer.echo(f"kvplan: {note}", err=True)
    if extras.target is not None and target is not None:
        raise KvplanError("give the server once: --target, or vllm bench serve's --base-url / --host and --port")
    if out is not None and not out.strip():
        raise KvplanError("--out is empty: name a folder (or leave --out out for a new reports/<scenario>/<time>)")
    outcome = stress_and_report(
        StressOptions(
            scenario,
            out_dir=Path(out) if out is not None else None,
            allocator=allocator,
            progress=not no_progress and extras.progress,
            calibration=calibration,
            recalibrate=recalibrate,
            target=target if target is not None else extras.target,
            api=extras.api or api,
            served_model_name=served_model_name,
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            force=force,
            server_kind=server_kind,
            tokenizer=tokenizer,
            output_format="vllm" if save_result or extras.wants_vllm_result else output_format,
            threads=threads,
            replicas=replicas,
            router=router,
            gpu=gpu,
            bench=BenchFlags(model, dataset_name, dataset_path, num_prompts, _rate(request_rate), burstiness,
                             max_concurrency, random_input_len, random_output_len, random_range_ratio,
                             random_prefix_len, sharegpt_output_len, custom_output_len, seed,
                             input_len=extras.input_len, output_len=extras.output_len,
                             num_warmups=extras.num_warmups or None, ramp=extras.ramp,
                             prefix_repetition=extras.prefix_repetition or None,
                             disable_shuffle=extras.disable_shuffle, sonnet=extras.sonnet or None,
                             hf=extras.hf or None, spec_bench=extras.spec_bench or None,
                             skip_chat_template=extras.skip_chat_template, no_oversample=extras.no_oversample),
            workers=workers,
            **_extras_options(extras),
        ),
        console=make_console(stderr=True) if as_json else None,
    )
    if as_json:
        typer.echo(json.dumps(json_safe(outcome.summary())))
    if outcome.interrupted:
        typer.echo("kvplan: interrupted: the partial result is written, marked incomplete", err=True)
        raise typer.Exit(130)  # as a shell reports SIGINT: an interrupted run never reads as a success
    if outcome.failed:
        raise typer.Exit(1)  # written, but failed: CI must see it


def _extras_options(extras) -> dict:
    """vllm bench serve's per-request, TLS, readiness and result-file flags as StressOptions fields."""
    from kvplan.results.vllm_result import VllmResultSettings
    from kvplan.stress.targets.openai_stream import RequestSettings

    given = set(extras.given)
    statistics = bool({"--percentile-metrics", "--metric-percentiles"} & given)
    result_file = None
    if extras.result_dir is not None or extras.result_filename is not None:
        result_file = Path(extras.result_dir or ".") / (extras.result_filename or "result.vllm.json")
    return {
        "request": RequestSettings(body=dict(extras.body), headers=dict(extras.headers),
                                   request_id_prefix=extras.request_id_prefix or "", ignore_eos=extras.ignore_eos,
                                   lora_modules=extras.lora_modules, lora_assignment=extras.lora_assignment),
        "insecure": extras.insecure,
        "ready_check_timeout_s": extras.ready_check_timeout_s,
        "vllm_result": VllmResultSettings(label=extras.label, metadata=dict(extras.metadata),
                                          percentile_metrics=extras.percentile_metrics if statistics else None,
                                          metric_percentiles=extras.metric_percentiles,
                                          goodput_ms=dict(extras.goodput_ms), detailed=True),
        "vllm_result_file": result_file,
        "append_result": extras.append_result,
        "profile": extras.profile,
        "plot_timeline_ms": extras.itl_thresholds_ms if extras.plot_timeline else None,
        "plot_dataset_stats": extras.plot_dataset_stats,
    }


@dataclass(frozen=True)
class StressOutcome:
    written: list[Path]
    failed: bool  # a run failed its scenario's max_error_rate: `kvplan stress` exits 1
    interrupted: bool = False  # Ctrl-C: the partial result is written, marked incomplete; exit 130
    results: tuple = ()  # the RunResults, in the order written

    def summary(self) -> dict:
        """What `kvplan stress --json` prints: the files, and per run its verdict and vLLM-keyed metrics."""
        return {"written": [str(p) for p in self.written], "failed": self.failed, "interrupted": self.interrupted,
                "runs": [{"allocator": r.allocator, "verdict": r.verdict, "complete": r.complete,
                          "metrics": dict(r.metrics), "prediction": dict(r.prediction)} for r in self.results]}


def _save_elsewhere(run: StressRun, report_text: str, problem: KvplanError) -> KvplanError:
    """The run could not be written where asked: write it to a new temp folder instead, and say both."""
    import tempfile

    from kvplan.stress.stress_run import save_run

    try:
        folder = Path(tempfile.mkdtemp(prefix=f"kvplan-{run.scenario.name}-unsaved-"))
        save_run(run, {Path("report.html"): report_text}, out_dir=folder)
    except (OSError, KvplanError) as exc:
        return KvplanError(f"the run finished but could not be saved ({problem}); nor in a temp folder ({exc}); "
                           "the tables above are all that is left of it")
    return KvplanError(f"the run finished but could not be saved ({problem}); saved it to {folder} instead")


def _bench_plots(run, opts: StressOptions) -> dict[Path, str | bytes]:
    """vllm bench serve's --plot-timeline and --plot-dataset-stats files, beside each vLLM result file
    (`<result>.timeline.html`, `<result>.dataset_stats.png`, as vLLM names them)."""
    from kvplan.report.bench_plots import dataset_stats_png, timeline_html
    from kvplan.stress.stress_run import vllm_result_path

    files: dict[Path, str | bytes] = {}
    for result_path, result in zip(run.result_paths, run.results):
        stem = vllm_result_path(run, result_path, result).absolute().with_suffix("")
        if opts.plot_timeline_ms is not None:
            files[stem.with_name(stem.name + ".timeline.html")] = timeline_html(result, opts.plot_timeline_ms)
        if opts.plot_dataset_stats:
            files[stem.with_name(stem.name + ".dataset_stats.png")] = dataset_stats_png(result)
    return files


def stress_and_report(opts: StressOptions, console: Console | None = None) -> StressOutcome:
    """`kvplan stress`: run, print the comparison, then write the result files and report.html
    together (all or none); a failed run is written all the same (its result is evidence). A run
    that cannot be written where asked is saved to a temp folder and reported as an error."""
    from kvplan.files import sigint_deferred
    from kvplan.report.html import render_report
    from kvplan.report.stress_view import render_agreement, render_allocators, render_failure
    from kvplan.stress.stress_run import run_stress, save_run

    console = console or make_console()
    run = run_stress(opts, console)
    for result in run.results:
        render_agreement(console, result)
    if len(run.results) == 2:
        render_allocators(console, *run.results)
    # the run is over: a (second) Ctrl-C now waits until its result and report are saved
    with sigint_deferred():
        report_text = render_report(list(run.results))
        try:
            written = list(save_run(run, {Path("report.html"): report_text, **_bench_plots(run, opts)}))
        except KvplanError as exc:
            raise _save_elsewhere(run, report_text, exc) from None
    for path in written:
        console.print(f"wrote {path}")
    failed = [r for r in run.results if r.verdict == "failed"]
    for result in failed:
        render_failure(console, result)
    return StressOutcome(written, bool(failed), run.interrupted, run.results)
