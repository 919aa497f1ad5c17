"""`kvplan stress`: validate the scenario, then for each target predict, run, measure and write
result.json. The command (`kvplan.cli.stress_command`) prints the tables and writes the HTML report
beside the result files.

Nothing is written until the scenario, the model and the engine settings have been checked, and
result.json is written atomically; an interrupted run still writes what it measured, marked
incomplete.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from kvplan.engine.config import Allocator
from kvplan.errors import Interrupted, KvplanError, read_user_file
from kvplan.files import check_output_dir, check_output_path, child_path, write_files
from kvplan.results.result import RunResult
from kvplan.stress.bench_flags import BenchFlags
from kvplan.stress.driver import run_target
from kvplan.stress.scenario import Scenario
from kvplan.stress.scenario_loader import load_scenario, parse_scenario
from kvplan.stress.target import Target
from kvplan.units import GIB
from kvplan.validation import short_repr
from kvplan.workload.arrivals import ClosedLoop, RampArrival
from kvplan.workload.request import Request

if TYPE_CHECKING:
    from kvplan.results.vllm_result import VllmResultSettings
    from kvplan.stress.targets.openai_stream import RequestSettings

# what a run writes into its folder, by name: --force removes these and nothing else of the user's
RUN_FILES = ("result.json", "result.vllm.json", "result-paged.json", "result-contiguous.json",
             "result-paged.vllm.json", "result-contiguous.vllm.json", "report.html")
CLOSED_LOOP_DURATION_CAP = 100_000  # requests generated for a closed-loop duration_s scenario
# a run's memory per request (its Request, the prediction's sequence, its record), measured with
# /usr/bin/time on the bundled engine: +25 MB for 12,000 more requests of 10 tokens, +31 MB for
# 4,000 more of 220 (2026-12-07); these round that up, as a bound to refuse by, not a figure
BYTES_PER_REQUEST, BYTES_PER_TOKEN = 2_000, 40
MEMORY_SAMPLE_REQUESTS = 1_000  # the requests generated before the check (their mean length is used)
MAX_GENERATED_REQUESTS = 1_000_000  # the scenario schema's num_requests limit, also for rate x duration
MAX_PROMPT_TOKENS = 2**27  # ~5 GB of prompt token ids held in memory
ALLOCATOR_CHOICES = ("paged", "contiguous", "both")
OUTPUT_FORMATS = ("kvplan", "vllm")  # vllm: result.vllm.json beside result.json
APIS = ("completions", "chat")
MAX_TIMEOUT_S = 86_400.0  # a day per request: beyond it a timeout is no bound


@dataclass(frozen=True)
class StressOptions:
    scenario_path: Path | None  # None: the scenario is built from `bench` (vllm bench serve's flags)
    out_dir: Path | None = None
    allocator: str = "paged"  # one of ALLOCATOR_CHOICES (checked below)
    progress: bool = True
    calibration: Path | None = None
    recalibrate: bool = False  # calibrate just before the run: this machine's speed drifts between runs
    target: str | None = None  # an OpenAI-compatible server's URL; None: the bundled engine
    api: str = "completions"
    served_model_name: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 120.0
    server_kind: str = "auto"  # with --target: auto (probe), vllm, sglang, tgi, openai
    tokenizer: str | None = None  # with --target: exact-length text prompts from this tokenizer
    output_format: str = "kvplan"  # "vllm": also result.vllm.json, as `vllm bench serve --save-result` writes
    force: bool = False  # write into an --out folder that holds an earlier run's files (they are removed)
    threads: int | None = None  # the engine's intra-op threads (scenario's engine.num_threads wins otherwise)
    replicas: int | None = None  # the bundled engine's replicas and their router (the scenario's otherwise)
    router: str | None = None
    bench: BenchFlags | None = None  # vllm bench serve's load flags: the scenario, or changes to it
    gpu: str | None = None  # with --target: the server's GPU (catalog name), for the GPU step-cost model
    # vllm bench serve's other flags (bench_serve_flags.BenchExtras): what each request carries, the
    # server's TLS and readiness, and the result file's shape, place and mode
    request: RequestSettings | None = None
    insecure: bool = False
    ready_check_timeout_s: float = 0.0
    vllm_result: VllmResultSettings | None = None
    vllm_result_file: Path | None = None  # --result-dir / --result-filename (default: result.vllm.json in --out)
    append_result: bool = False
    workers: int = 1  # with --target: client processes, one merged run
    profile: bool = False  # with --target: the server's profiler around the run (--profile)
    # vllm bench serve's plots beside the vLLM result file: --plot-timeline's ITL thresholds (ms), or
    # None for no timeline; --plot-dataset-stats
    plot_timeline_ms: tuple[float, float] | None = None
    plot_dataset_stats: bool = False

    def __post_init__(self) -> None:
        """Each flag checked once, whether or not the run uses it (a bad value is never ignored)."""
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise KvplanError(
                f"--timeout-s must be a number of seconds in (0, {MAX_TIMEOUT_S:,}], got {self.timeout_s}"
            )
        if self.api not in APIS:
            raise KvplanError(f"--api must be one of {', '.join(APIS)}, got {short_repr(self.api)}")
        if self.allocator not in ALLOCATOR_CHOICES:
            raise KvplanError(f"--allocator must be paged, contiguous or both, got {short_repr(self.allocator)}")
        if self.target is not None and not self.target.strip():
            raise KvplanError("--target is empty: give the server's URL, e.g. http://127.0.0.1:8000")
        if self.target is not None:
            from kvplan.stress.targets.target_url import public_url

            public_url(self.target)  # before anything reads from it


@dataclass(frozen=True)
class StressRun:
    """The runs, in memory; `save_run` writes them (nothing is written before)."""

    scenario: Scenario
    out_dir: Path
    results: tuple[RunResult, ...]
    stale: tuple[Path, ...] = ()  # --force: files of the earlier run in out_dir, removed once the new ones are in
    default_out: bool = True  # a new reports/<scenario>/<time> folder: point `latest` at it once written
    output_format: str = "kvplan"  # "vllm": result.vllm.json beside each result file
    vllm_result: VllmResultSettings | None = None
    vllm_result_file: Path | None = None
    append_result: bool = False

    @property
    def result_paths(self) -> tuple[Path, ...]:
        one = len(self.results) == 1
        return tuple(self.out_dir / ("result.json" if one else f"result-{r.allocator}.json") for r in self.results)

    @property
    def interrupted(self) -> bool:
        return any(not r.complete for r in self.results)


def _check_memory(name: str, expected: int, sample: list[Request], baseline_bytes: int) -> None:
    """Refuse, before the rest are generated, a run whose requests (held with their prediction and
    records), beside `baseline_bytes` the target still takes, would not fit in the memory this
    process may still take."""
    from kvplan.stress.memory import headroom_bytes

    room = headroom_bytes()
    tokens = sum(r.prompt_tokens + r.output_tokens for r in sample) / len(sample)
    need = int(expected * (BYTES_PER_REQUEST + BYTES_PER_TOKEN * tokens)) + baseline_bytes
    if room is not None and need > room:
        raise KvplanError(f"scenario {name!r}: {expected:,} requests of ~{tokens:,.0f} tokens need about "
                          f"{need / GIB:.1f} GiB to hold with their prediction and records; this process may take "
                          f"{room / GIB:.1f} GiB more: lower num_requests, or split the run (several hosts with "
                          "disjoint seeds, merged with `kvplan report --merge`)")


def engine_baseline_bytes(scenario: Scenario) -> int:
    """What the bundled engine will still take besides the requests: its modules (imported now, so
    the address space they map is counted as used) and its KV pool when the scenario fixes it."""
    import kvplan.engine.llm_engine  # noqa: F401 - torch's mappings, counted before the requests are

    blocks = scenario.num_gpu_blocks()
    return blocks * scenario.bytes_per_block() if blocks is not None else 0


def scenario_requests(scenario: Scenario, notes: list[str] | None = None, baseline_bytes: int = 0) -> list[Request]:
    """The scenario's request stream, refused up front when it is too big to hold: an open-loop
    `duration_s` at a high rate (1e6 req/s for a week) would otherwise generate until memory runs out,
    and 1,000,000 requests that do not fit beside the target's `baseline_bytes` in this process's
    memory (`_check_memory`). A dataset's notes (rows skipped, counts estimated) are appended to `notes`."""
    arrival = scenario.arrival
    closed = isinstance(arrival, ClosedLoop)
    expected = scenario.num_requests
    if expected is None:
        rate = 0.0 if isinstance(arrival, (ClosedLoop, RampArrival)) else arrival.rate_per_s  # a ramp has a count
        expected = CLOSED_LOOP_DURATION_CAP if closed else int(min(rate * (scenario.duration_s or 0.0), 1e18)) + 1
    if expected > MAX_GENERATED_REQUESTS:
        raise KvplanError(f"scenario {scenario.name!r} asks for about {expected:,} requests "
                          f"(rate_per_s x duration_s); at most {MAX_GENERATED_REQUESTS:,} per run")
    requests: list[Request] = []
    total = 0
    cap = CLOSED_LOOP_DURATION_CAP if closed and scenario.num_requests is None else None  # that stream has no end
    stream = scenario.dataset_stream() if scenario.workload.dataset is not None else None
    if stream is not None and notes is not None:
        notes.extend(stream.notes)
    for spec in islice(scenario.request_stream(stream=stream), cap):
        if len(requests) == MEMORY_SAMPLE_REQUESTS and expected > MEMORY_SAMPLE_REQUESTS:
            _check_memory(scenario.name, expected, requests, baseline_bytes)
        total += spec.prompt_tokens
        if total > MAX_PROMPT_TOKENS or len(requests) >= MAX_GENERATED_REQUESTS:
            raise KvplanError(f"scenario {scenario.name!r} has more than {MAX_PROMPT_TOKENS:,} prompt tokens or "
                              f"{MAX_GENERATED_REQUESTS:,} requests in all; that is the most one run holds in memory")
        requests.append(spec)
    return requests


def _earlier_run_files(out_dir: Path) -> list[Path]:
    return sorted(p for pattern in RUN_FILES for p in out_dir.glob(pattern)) if out_dir.is_dir() else []


def _out_dir(opts: StressOptions, scenario: Scenario) -> Path:
    """`--out`, refused when it holds an earlier run unless --force; by default a new folder per
    run, `reports/<scenario>/<UTC time>[-target]`, so no run ever overwrites another."""
    if opts.out_dir is not None:
        if opts.out_dir.exists() and not opts.out_dir.is_dir():
            raise KvplanError(f"--out {opts.out_dir} exists and is not a directory")
        check_output_dir(opts.out_dir)  # before the run: an unwritable folder is found now, not after it
        earlier = _earlier_run_files(opts.out_dir)
        if earlier and not opts.force:
            raise KvplanError(
                f"--out {opts.out_dir} already holds a run ({', '.join(p.name for p in earlier[:3])}); "
                "choose another folder, leave --out out (a new folder per run), or pass --force to replace it"
            )
        return opts.out_dir
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-target" if opts.target else "")
    base = check_output_dir(child_path("reports", scenario.name))
    for n in range(1, 10_000):
        out_dir = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:  # reserved by creating it: two runs started in the same second (two processes) get two folders
            out_dir.mkdir(parents=True)
            return out_dir
        except FileExistsError:
            continue
        except OSError as exc:
            raise KvplanError(f"cannot create the run folder {out_dir}: {exc.strerror or exc}") from None
    raise KvplanError(f"{base} holds 10,000 runs started in the same second; pass --out")


def _point_latest(out_dir: Path) -> None:
    """`reports/<scenario>/latest` -> the newest run folder (best effort: some filesystems have no links)."""
    link = out_dir.parent / "latest"
    try:
        if link.is_symlink() or not link.exists():
            tmp = out_dir.parent / f".latest.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(out_dir.name)
            os.replace(tmp, link)
    except OSError:
        pass


def _check(opts: StressOptions) -> None:
    if opts.allocator not in ALLOCATOR_CHOICES:
        raise KvplanError(f"--allocator {opts.allocator!r}: choose paged, contiguous or both")
    if opts.target and opts.allocator != "paged":
        raise KvplanError("--allocator applies to the bundled engine; a --target server uses its own allocator")
    if opts.threads is not None and opts.target:
        raise KvplanError("--threads applies to the bundled engine; a --target server sets its own")
    if opts.threads is not None and opts.threads < 1:
        raise KvplanError(f"--threads {opts.threads}: give 1 or more (leave it out to use the free cores)")
    from kvplan.stress.targets.server_features import check_server_kind

    check_server_kind(opts.server_kind)
    if not opts.target and opts.server_kind != "auto":
        raise KvplanError("--server-kind applies to a --target server")
    if opts.gpu is not None and not opts.target:
        raise KvplanError("--gpu names a --target server's GPU; the bundled engine runs here")
    if opts.gpu is not None:
        from kvplan.spec.gpu import load_gpu

        load_gpu(opts.gpu)  # an unknown GPU is one line now, not after the run
    if opts.output_format not in OUTPUT_FORMATS:
        raise KvplanError(f"--format {opts.output_format!r}: choose one of {', '.join(OUTPUT_FORMATS)}")
    if opts.vllm_result_file is not None:
        check_output_path(opts.vllm_result_file, flag="--result-filename")
    request = opts.request
    server_only = [name for name, given in (
        ("--temperature/--top-p/--logprobs/--extra-body/...", bool(request and request.body)),
        ("--header", bool(request and request.headers)), ("--lora-modules", bool(request and request.lora_modules)),
        ("--request-id-prefix", bool(request and request.request_id_prefix)),
        ("--insecure", opts.insecure), ("--ready-check-timeout-sec", opts.ready_check_timeout_s > 0),
        ("--profile", opts.profile)) if given]
    if opts.profile and opts.workers > 1:
        raise KvplanError("--profile with --workers: run one client process (the profiler's start and stop "
                          "bracket one run)")
    if opts.workers != 1 and not opts.target:
        server_only.insert(0, "--workers")
    if not 1 <= opts.workers <= 256:
        raise KvplanError(f"--workers must be in 1..256, got {opts.workers}")
    if server_only and not opts.target:
        raise KvplanError(f"{server_only[0]} applies to a server (--target, or --base-url / --host and --port); "
                          "the bundled engine runs greedy requests in this process")


def _recalibrate(opts: StressOptions, scenario: Scenario, console: Console) -> StressOptions:
    from kvplan.stress.calibrate import calibrate_scenario, calibration_path, fit_problem

    path = opts.calibration or calibration_path(scenario.name, scenario.engine.device)
    fit = calibrate_scenario(scenario)
    problem = fit_problem(fit)
    if problem:
        raise KvplanError(f"--calibrate: {problem}; not stored and not used. Rerun on a quieter machine, or store it "
                          "anyway with `kvplan calibrate --scenario ... --force`")
    fit.save(path)
    console.print(f"calibrated the cost model on this machine: {path}")
    return replace(opts, calibration=path)


def _make_target(allocator: Allocator, opts: StressOptions, scenario: Scenario) -> Target:
    if opts.target:
        if (scenario.workload.sessions is not None or scenario.workload.conversations is not None) \
                and opts.workers > 1:
            raise KvplanError("conversations run from one client process (a later turn resends the reply its "
                              "process received): drop --workers")
        from kvplan.stress.targets.http_target import HttpOptions, HttpTarget
        from kvplan.stress.targets.openai_stream import RequestSettings

        request = opts.request or RequestSettings()
        return HttpTarget(scenario, HttpOptions(opts.target, opts.api, opts.served_model_name, opts.api_key_env,
                                                opts.timeout_s, opts.server_kind, opts.tokenizer, opts.gpu,
                                                replace(request, seed=scenario.seed), opts.insecure,
                                                opts.ready_check_timeout_s, opts.workers, opts.profile))
    from kvplan.stress.targets.engine_target import EngineTarget

    return EngineTarget(scenario, allocator)


def _finite(value: object) -> object:
    """NaN and infinities become null (JSON has neither), in nested lists and dicts too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def vllm_result_path(run: StressRun, result_path: Path, result: RunResult) -> Path:
    """Where the result's vLLM-keyed file goes: --result-dir/--result-filename, else beside result.json."""
    path = run.vllm_result_file
    if path is None or len(run.results) > 1:
        default = result_path.name.removesuffix(".json") + ".vllm.json"
        path = result_path.with_name(default) if path is None else path.with_name(
            path.name.removesuffix(".json") + f"-{result.allocator}.json")
    return path


def _vllm_file(result_path: Path, result: RunResult, run: StressRun) -> tuple[Path, str]:
    """result.vllm.json beside result.json (or --result-dir/--result-filename): the keys of `vllm
    bench serve --save-result --save-detailed`; --append-result adds it as a new line to what the
    file holds, as vLLM does."""
    from kvplan.results.vllm_result import vllm_bench_result

    path = vllm_result_path(run, result_path, result)
    text = json.dumps(_finite(vllm_bench_result(result, run.vllm_result)), allow_nan=False)
    if run.append_result and path.is_file():
        before = read_user_file(path, "vLLM result to append to", max_bytes=1 << 30)
        text = before + ("\n" if before else "") + text
    return path, text


def stress_scenario(opts: StressOptions) -> Scenario:
    """The scenario file, the flags' scenario, or the file with the flags' changes (one line on any problem).
    `--tokenizer` counts a dataset's text (a scenario's own `dataset.tokenizer` wins)."""
    bench = opts.bench if opts.bench is not None and opts.bench.given() else None
    if bench is None and opts.scenario_path is None:
        raise KvplanError("give --scenario (a file or a bundled name), or --model with vllm bench serve's load flags "
                          "(--dataset-name, --num-prompts, --request-rate, ...)")
    base = load_scenario(opts.scenario_path) if opts.scenario_path is not None else None
    if bench is None:
        assert base is not None, "one of the two, checked above"
        data = base.to_dict()
    else:
        data = bench.scenario(base.to_dict() if base is not None else None, opts.tokenizer, opts.api)
    routed = {k: v for k, v in (("replicas", opts.replicas), ("router", opts.router)) if v is not None}
    data.update(routed)
    dataset = (data.get("workload") or {}).get("dataset")
    if opts.tokenizer is not None and not opts.target and not isinstance(dataset, dict):
        raise KvplanError("--tokenizer applies to a --target server or to a dataset's text prompts")
    if base is not None and bench is None and not routed and (
            opts.tokenizer is None or not isinstance(dataset, dict) or dataset.get("tokenizer")):
        return base
    if isinstance(dataset, dict) and opts.tokenizer is not None:
        dataset.setdefault("tokenizer", opts.tokenizer)
    where = f"{opts.scenario_path} with {' '.join(bench.given())}" if base is not None and bench else \
        ("the command's flags" if base is None else str(opts.scenario_path))
    if routed:
        where += " with " + " ".join(f"--{k} {v}" for k, v in routed.items())
    return parse_scenario(data, where)


def _with_server_settings(opts: StressOptions, scenario: Scenario, notes: list[str]) -> Scenario:
    """The scenario planned with the --target server's own pool, block size, KV dtype and max_model_len."""
    from kvplan.stress.targets.openai_http import api_key
    from kvplan.stress.targets.server_settings import adopt, read_server_settings

    assert opts.target is not None, "called for a --target run"
    key = api_key(opts.api_key_env)
    settings = read_server_settings(
        opts.target, {"Authorization": f"Bearer {key}"} if key else {}, opts.served_model_name
    )
    data, said = adopt(scenario, settings)
    notes.extend(said)
    return parse_scenario(data, f"{opts.scenario_path or 'the scenario'} with the server's settings")


def run_stress(opts: StressOptions, console: Console | None = None) -> StressRun:
    """Every run the options ask for, in memory: the output folder (and a calibration file to
    write) are checked first, and nothing is written until `save_run`."""
    console = console or Console()
    _check(opts)
    scenario = stress_scenario(opts)
    if opts.threads is not None:  # recorded in the result's scenario: a different thread count is a different run
        scenario = scenario.model_copy(update={"engine": replace(scenario.engine, num_threads=opts.threads)})
    if opts.recalibrate:
        from kvplan.stress.calibrate import calibration_path

        check_output_path(opts.calibration or calibration_path(scenario.name, scenario.engine.device))
    notes: list[str] = []
    if opts.target and scenario.replicas > 1:
        raise KvplanError(f"{scenario.replicas} replicas behind the {scenario.router} router are the bundled "
                          "engine's; a --target server (or the router in front of it) routes its own requests")
    if opts.target:
        scenario = _with_server_settings(opts, scenario, notes)
    requests = scenario_requests(scenario, notes, 0 if opts.target else engine_baseline_bytes(scenario))
    for note in notes:
        console.print(f"kvplan: note: {note}", markup=False, highlight=False)
    out_dir = _out_dir(opts, scenario)
    earlier = tuple(_earlier_run_files(out_dir))  # --force: removed once the new files are in
    try:
        return _run_all(opts, scenario, requests, out_dir, earlier, console, tuple(notes))
    except BaseException:
        if opts.out_dir is None:  # the folder reserved for this run stays only with the run in it
            for folder in (out_dir, out_dir.parent, out_dir.parent.parent):  # and reports/<scenario>/ if empty
                try:
                    folder.rmdir()
                except OSError:
                    break
        raise


def _run_all(opts: StressOptions, scenario: Scenario, requests: list[Request], out_dir: Path,
             earlier: tuple[Path, ...], console: Console, notes: tuple[str, ...] = ()) -> StressRun:
    if opts.recalibrate:
        opts = _recalibrate(opts, scenario, console)
    results: list[RunResult] = []
    allocators: list[Allocator] = ["paged", "contiguous"]
    for allocator in allocators if opts.allocator == "both" else [a for a in allocators if a == opts.allocator]:
        try:  # built one at a time, so two engines' KV pools never coexist
            results.append(run_target(scenario, requests, _make_target(allocator, opts, scenario),
                                      calibration=opts.calibration, console=console, progress=opts.progress,
                                      notes=notes))
        except KeyboardInterrupt:  # interrupted outside the request loop (engine build): nothing measured
            if not results:
                raise Interrupted("interrupted before any request ran; nothing written") from None
            break
        if not results[-1].complete:
            break
    return StressRun(scenario, out_dir, tuple(results), earlier, opts.out_dir is None, opts.output_format,
                     opts.vllm_result, opts.vllm_result_file, opts.append_result)


def save_run(run: StressRun, extra: dict[Path, str | bytes] | None = None,
             out_dir: Path | None = None) -> tuple[Path, ...]:
    """Write the result files and `extra` (report.html) into `out_dir` (default: the run's) as one:
    all of them or none (`files.write_files`); the earlier run's files go once the new ones are in."""
    folder = out_dir or run.out_dir
    if folder == run.out_dir:  # another run that wrote here meanwhile (the same --out) is not overwritten
        appeared = [p.name for p in _earlier_run_files(folder) if p not in run.stale]
        if appeared:
            raise KvplanError(f"another run wrote {', '.join(appeared[:3])} into {folder} while this one ran")
    files: dict[Path, str | bytes] = {folder / p.name: r.to_json() for p, r in zip(run.result_paths, run.results)}
    if run.output_format == "vllm":
        files.update(_vllm_file(folder / p.name, r, run) for p, r in zip(run.result_paths, run.results))
    # extra files named by a bare name go into the folder; an absolute path (a plot beside the vLLM
    # result file) stays where it was asked for
    files.update({Path(p) if Path(p).is_absolute() else folder / Path(p).name: text
                  for p, text in (extra or {}).items()})
    written = write_files(files, remove=run.stale if folder == run.out_dir else ())
    if run.default_out and folder == run.out_dir:
        _point_latest(folder)
    return tuple(written)
