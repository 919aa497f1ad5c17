"""The rest of `vllm bench serve`'s flags (vLLM 0.19.1 `vllm/benchmarks/serve.py` and
`datasets.py`: 90 in all) on `kvplan stress`. The 17 that shape the load (--model, --dataset-name,
--num-prompts, --request-rate, ...) are kvplan options of their own (`bench_flags.BenchFlags`);
these 73 arrive as extra arguments, parsed here by argparse as vLLM parses them (same names,
types, nargs and defaults), then either given the same meaning (`BenchExtras`) or refused in one
line saying why: a flag for audio, images, reranking or embeddings has nothing to act on in a text
load generator. Two that vLLM parses and never reads (`NO_EFFECT`) are taken, with a note.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from kvplan.errors import KvplanError
from kvplan.results.slo import goodput_ms

# flag -> why kvplan refuses it (given at all, even as its default: a user asking expects it to act)
REFUSED = {
    "--enable-multimodal-chat": "kvplan sends text prompts only (no images, audio or video)",
    "--asr-max-audio-len-sec": "audio datasets: kvplan sends text prompts only",
    "--asr-min-audio-len-sec": "audio datasets: kvplan sends text prompts only",
    "--random-batch-size": "it batches prompts for embedding endpoints; kvplan drives generation endpoints",
    "--no-reranker": "it applies to the random_rerank dataset; kvplan drives generation endpoints",
    "--random-mm-base-items-per-request": "multimodal random prompts: kvplan sends text prompts only",
    "--random-mm-num-mm-items-range-ratio": "multimodal random prompts: kvplan sends text prompts only",
    "--random-mm-limit-mm-per-prompt": "multimodal random prompts: kvplan sends text prompts only",
    "--random-mm-bucket-config": "multimodal random prompts: kvplan sends text prompts only",
}
# flags vLLM 0.19.1 parses and then never reads in `vllm bench serve` (serve.py, datasets.py): taken,
# with the same (no) effect, and said so
NO_EFFECT = {
    "--use-beam-search": "vllm bench serve 0.19.1 parses it and sends no beam search (only `vllm bench latency` "
                         "and `throughput` read it)",
    "--no-stream": "it stops vLLM streaming a Hugging Face dataset from the Hub; kvplan reads local copies whole",
}
BACKENDS = {"openai": "completions", "vllm": "completions", "openai-chat": "chat"}  # vLLM's generation backends
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
SAMPLING = ("top_p", "top_k", "min_p", "temperature", "frequency_penalty", "presence_penalty", "repetition_penalty")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise KvplanError(f"{message} (vllm bench serve's flags; `kvplan stress --help` lists kvplan's)")


def _parser() -> _Parser:
    p = _Parser(prog="kvplan stress", add_help=False, allow_abbrev=False)
    add = p.add_argument
    add("--label"), add("--backend", default="openai"), add("--base-url"), add("--host", default="127.0.0.1")
    add("--port", type=int, default=8000), add("--endpoint", default="/v1/completions")
    add("--header", nargs="*", metavar="KEY=VALUE"), add("--input-len", type=int), add("--output-len", type=int)
    add("--tokenizer-mode", default="auto"), add("--logprobs", type=int), add("--disable-tqdm", action="store_true")
    add("--num-warmups", type=int, default=0), add("--save-detailed", action="store_true")
    add("--append-result", action="store_true"), add("--metadata", nargs="*", metavar="KEY=VALUE")
    add("--result-dir"), add("--result-filename"), add("--ignore-eos", action="store_true")
    add("--percentile-metrics"), add("--metric-percentiles", default="99"), add("--goodput", nargs="+")
    add("--request-id-prefix"), add("--top-p", type=float), add("--top-k", type=int), add("--min-p", type=float)
    add("--temperature", type=float), add("--frequency-penalty", type=float), add("--presence-penalty", type=float)
    add("--repetition-penalty", type=float), add("--lora-modules", nargs="+")
    add("--lora-assignment", default="random", choices=["random", "round-robin"])
    add("--ramp-up-strategy", choices=["linear", "exponential"]), add("--ramp-up-start-rps", type=int)
    add("--ramp-up-end-rps", type=int), add("--ready-check-timeout-sec", type=int, default=0)
    add("--extra-body", type=_json_object), add("--skip-tokenizer-init", action="store_true")
    add("--insecure", action="store_true"), add("--trust-remote-code", action="store_true")
    add("--no-oversample", action="store_true"), add("--skip-chat-template", action="store_true")
    add("--disable-shuffle", action="store_true")
    add("--sonnet-input-len", type=int), add("--sonnet-output-len", type=int), add("--sonnet-prefix-len", type=int)
    add("--prefix-repetition-prefix-len", type=int), add("--prefix-repetition-suffix-len", type=int)
    add("--prefix-repetition-num-prefixes", type=int), add("--prefix-repetition-output-len", type=int)
    add("--hf-subset"), add("--hf-split"), add("--hf-name"), add("--hf-output-len", type=int)
    add("--blazedit-min-distance", type=float, default=0.0), add("--blazedit-max-distance", type=float, default=1.0)
    add("--spec-bench-output-len", type=int, default=256), add("--spec-bench-category")
    add("--use-beam-search", action="store_true"), add("--no-stream", action="store_true")
    add("--profile", action="store_true"), add("--plot-timeline", action="store_true")
    add("--timeline-itl-thresholds", type=float, nargs=2, default=[25.0, 50.0], metavar=("THRESHOLD1", "THRESHOLD2"))
    add("--plot-dataset-stats", action="store_true")
    for flag in REFUSED:  # parsed (so the refusal names the flag, not "unrecognized"), then refused
        add(flag, nargs="*", dest="refused_" + flag[2:].replace("-", "_"))
    return p


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise argparse.ArgumentTypeError(f"--extra-body must be a JSON object, got {text[:60]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--extra-body must be a JSON object, got {text[:60]!r}")
    return value


def _pairs(items: list[str] | None, flag: str, sep: str = "=") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or ():
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise KvplanError(f"{flag} takes KEY{sep}VALUE pairs, got {item[:60]!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class BenchExtras:
    """vllm bench serve's flags beyond the load's shape, with vLLM's meaning."""

    label: str | None = None
    target: str | None = None  # --base-url, else http://--host:--port when either is given
    api: str | None = None  # from --backend / --endpoint (None: kvplan's --api)
    headers: dict[str, str] = field(default_factory=dict)
    input_len: int | None = None
    output_len: int | None = None
    body: dict[str, Any] = field(default_factory=dict)  # sampling, logprobs, --extra-body: sent in every request
    ignore_eos: bool = False
    progress: bool = True
    num_warmups: int = 0
    save_detailed: bool = False
    append_result: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    result_dir: str | None = None
    result_filename: str | None = None
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    metric_percentiles: tuple[float, ...] = (99.0,)
    goodput_ms: dict[str, float] = field(default_factory=dict)
    request_id_prefix: str | None = None
    lora_modules: tuple[str, ...] = ()
    lora_assignment: str = "random"
    ramp: tuple[str, int, int] | None = None  # (strategy, start rps, end rps)
    ready_check_timeout_s: float = 0.0
    insecure: bool = False
    no_oversample: bool = False
    disable_shuffle: bool = False
    prefix_repetition: dict[str, int] = field(default_factory=dict)  # prefix_len, suffix_len, num_prefixes, output_len
    sonnet: dict[str, int] = field(default_factory=dict)  # input_len, output_len, prefix_len
    hf: dict[str, Any] = field(default_factory=dict)  # name, subset, split, output_len, min/max_distance (given)
    spec_bench: dict[str, Any] = field(default_factory=dict)  # output_len, category (given)
    skip_chat_template: bool = False
    profile: bool = False  # POST /start_profile before the run, /stop_profile after (vLLM's --profile)
    plot_timeline: bool = False  # <result>.timeline.html beside the vLLM result file
    itl_thresholds_ms: tuple[float, float] = (25.0, 50.0)
    plot_dataset_stats: bool = False  # <result>.dataset_stats.png
    no_effect: tuple[str, ...] = ()  # notes on flags vLLM parses and ignores
    given: tuple[str, ...] = ()  # the flags as typed, for the scenario's description

    @property
    def wants_vllm_result(self) -> bool:
        return bool(self.result_dir or self.result_filename or self.append_result or self.save_detailed
                    or self.metadata or self.label or self.plot_timeline or self.plot_dataset_stats)


def parse_bench_extras(args: list[str]) -> BenchExtras:
    """vllm bench serve's remaining flags from `args` (kvplan's own were parsed already); a flag
    neither knows, a bad value or a refused flag is one `KvplanError` line."""
    if not args:
        return BenchExtras()
    ns, rest = _parser().parse_known_args(args)
    if rest:
        raise KvplanError(f"no such option {rest[0]!r} (neither kvplan's nor vllm bench serve's)")
    for flag in REFUSED:
        if getattr(ns, "refused_" + flag[2:].replace("-", "_")) is not None:
            raise KvplanError(f"{flag} is vllm bench serve's but cannot apply here: {REFUSED[flag]}")
    return _extras(ns, [a for a in args if a.startswith("--")])


def _api(ns: argparse.Namespace) -> str:
    """The API the backend and endpoint name together (vLLM's request functions check the endpoint's
    suffix against the backend: openai-chat needs .../chat/completions)."""
    if ns.backend not in BACKENDS:
        raise KvplanError(f"--backend {ns.backend!r}: kvplan drives {', '.join(BACKENDS)} (text generation over "
                          "the OpenAI API)")
    api = ENDPOINTS.get(ns.endpoint.rstrip("/"))
    if api is None:
        raise KvplanError(f"--endpoint {ns.endpoint!r}: kvplan drives {', '.join(ENDPOINTS)}")
    if BACKENDS[ns.backend] != api:
        wanted = "/v1/chat/completions" if BACKENDS[ns.backend] == "chat" else "/v1/completions"
        raise KvplanError(f"--backend {ns.backend} sends to {wanted}, not --endpoint {ns.endpoint}")
    return api


def _extras(ns: argparse.Namespace, typed: list[str]) -> BenchExtras:
    body: dict[str, Any] = {k: getattr(ns, k) for k in SAMPLING if getattr(ns, k) is not None}
    if ns.logprobs is not None:
        body["logprobs"] = ns.logprobs
    if ns.extra_body:
        body.update(ns.extra_body)  # vLLM: sampling flags, then --extra-body over them
    metrics = tuple(m.strip() for m in (ns.percentile_metrics or "ttft,tpot,itl").split(",") if m.strip())
    bad = [m for m in metrics if m not in PERCENTILE_METRICS]
    if bad:
        raise KvplanError(f"--percentile-metrics {bad[0]!r}: choose from {', '.join(PERCENTILE_METRICS)}")
    bad_percentiles = KvplanError(f"--metric-percentiles {ns.metric_percentiles!r}: comma-separated numbers in "
                                  "(0, 100]")
    try:
        percentiles = tuple(float(p) for p in ns.metric_percentiles.split(",") if p.strip())
    except ValueError:
        raise bad_percentiles from None
    if not percentiles or not all(0 < p <= 100 for p in percentiles):
        raise bad_percentiles
    goodput = {k: goodput_ms(k, v) for k, v in _pairs(ns.goodput, "--goodput", ":").items()}
    ramp = None
    if ns.ramp_up_strategy is not None or ns.ramp_up_start_rps is not None or ns.ramp_up_end_rps is not None:
        ramp = _ramp(ns)
    if ns.tokenizer_mode not in ("auto", "hf"):
        raise KvplanError(f"--tokenizer-mode {ns.tokenizer_mode!r}: kvplan loads tokenizers with transformers "
                          "(auto or hf)")
    for name in ("input_len", "output_len", "num_warmups", "logprobs", "ready_check_timeout_sec", "sonnet_input_len",
                 "sonnet_output_len", "sonnet_prefix_len", "hf_output_len", "spec_bench_output_len"):
        value = getattr(ns, name)
        if value is not None and value < 0:
            raise KvplanError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
    repetition = {k: getattr(ns, "prefix_repetition_" + k) for k in ("prefix_len", "suffix_len", "num_prefixes",
                                                                     "output_len")}
    base_url = ns.base_url.rstrip("/") if ns.base_url else None
    target = base_url or (f"http://{_host(ns.host)}:{ns.port}" if {"--host", "--port"} & set(typed) else None)
    return BenchExtras(
        label=ns.label, target=target, api=_api(ns) if {"--backend", "--endpoint"} & set(typed) else None,
        headers=_pairs(ns.header, "--header"), input_len=ns.input_len, output_len=ns.output_len, body=body,
        ignore_eos=ns.ignore_eos, progress=not ns.disable_tqdm, num_warmups=ns.num_warmups,
        save_detailed=ns.save_detailed, append_result=ns.append_result, metadata=_pairs(ns.metadata, "--metadata"),
        result_dir=ns.result_dir, result_filename=ns.result_filename, percentile_metrics=metrics,
        metric_percentiles=percentiles, goodput_ms=goodput, request_id_prefix=ns.request_id_prefix,
        lora_modules=tuple(ns.lora_modules or ()), lora_assignment=ns.lora_assignment, ramp=ramp,
        ready_check_timeout_s=float(ns.ready_check_timeout_sec), insecure=ns.insecure, no_oversample=ns.no_oversample,
        disable_shuffle=ns.disable_shuffle, prefix_repetition={k: v for k, v in repetition.items() if v is not None},
        sonnet={k: getattr(ns, "sonnet_" + k) for k in ("input_len", "output_len", "prefix_len")
                if getattr(ns, "sonnet_" + k) is not None},
        hf=_given(ns, typed, {"name": "--hf-name", "subset": "--hf-subset", "split": "--hf-split",
                              "output_len": "--hf-output-len", "min_distance": "--blazedit-min-distance",
                              "max_distance": "--blazedit-max-distance"}),
        spec_bench=_given(ns, typed, {"output_len": "--spec-bench-output-len", "category": "--spec-bench-category"}),
        skip_chat_template=ns.skip_chat_template, profile=ns.profile, plot_timeline=ns.plot_timeline,
        itl_thresholds_ms=_thresholds(ns.timeline_itl_thresholds), plot_dataset_stats=ns.plot_dataset_stats,
        no_effect=tuple(f"{flag} has no effect: {why}" for flag, why in NO_EFFECT.items() if flag in typed),
        given=tuple(typed))


def _given(ns: argparse.Namespace, typed: list[str], flags: dict[str, str]) -> dict[str, Any]:
    """{key: value} of the flags typed (a default vLLM fills in is the dataset reader's to apply)."""
    out = {key: getattr(ns, flag[2:].replace("-", "_")) for key, flag in flags.items() if flag in typed}
    for key in ("min_distance", "max_distance"):
        if key in out and not 0.0 <= out[key] <= 1.0:
            raise KvplanError(f"--blazedit-{key.replace('_', '-')} must be in [0, 1], got {out[key]}")
    if out.get("min_distance", 0.0) > out.get("max_distance", 1.0):
        raise KvplanError("--blazedit-min-distance must not exceed --blazedit-max-distance")
    return out


def _thresholds(values: list[float]) -> tuple[float, float]:
    low, high = values
    if not (0 < low < high) or high == float("inf"):
        raise KvplanError(f"--timeline-itl-thresholds takes two increasing positive milliseconds, got {low} {high}")
    return low, high


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host  # vLLM's join_host_port


def _ramp(ns: argparse.Namespace) -> tuple[str, int, int]:
    """vLLM's checks, in its words' order (serve.py main_async)."""
    if ns.ramp_up_strategy is None:
        raise KvplanError("--ramp-up-start-rps / --ramp-up-end-rps need --ramp-up-strategy (linear or exponential)")
    start, end = ns.ramp_up_start_rps, ns.ramp_up_end_rps
    if start is None or end is None:
        raise KvplanError("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
    if start < 0 or end < 0:
        raise KvplanError("--ramp-up-start-rps and --ramp-up-end-rps must be non-negative")
    if start > end:
        raise KvplanError(f"--ramp-up-start-rps {start} must not exceed --ramp-up-end-rps {end}")
    if start == 0:  # vLLM: exponential refuses it; linear asserts on the first request's rate of 0
        raise KvplanError("a ramp-up cannot start at 0 requests/s (its first request would never be sent)")
    return ns.ramp_up_strategy, start, end
