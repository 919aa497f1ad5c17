"""`vllm bench serve`'s 90 flags (vLLM 0.19.1, listed in tests/data from its sdist) on `kvplan
stress`: each is a kvplan option, taken with vLLM's meaning, or refused in one line saying why;
and the ones that shape what is sent reach the server as vLLM sends them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.cli import app
from kvplan.cli import main as cli_main
from kvplan.errors import KvplanError
from kvplan.stress.bench_serve_flags import REFUSED, _parser, parse_bench_extras

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_bench_serve_0.19.1_flags.tsv"
VLLM_FLAGS = [line.split("\t")[0] for line in DATA.read_text().splitlines() if line and not line.startswith("#")]


def _kvplan_options() -> set[str]:
    command = typer.main.get_command(app).commands["stress"]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in p.opts if opt.startswith("--")}


def test_every_flag_is_kvplan_s_taken_or_refused_with_a_reason() -> None:
    assert len(VLLM_FLAGS) == 90 and len(set(VLLM_FLAGS)) == 90
    own, parsed = _kvplan_options(), set(_parser()._option_string_actions)
    works = [f for f in VLLM_FLAGS if (f in own or f in parsed) and f not in REFUSED]
    refused = [f for f in VLLM_FLAGS if f in REFUSED]
    assert set(works) | set(refused) == set(VLLM_FLAGS)
    # taken with vLLM's meaning; the nine refused are audio, multimodal, embedding and rerank flags
    assert len(works) == 81 and len(refused) == 9, (len(works), refused)
    assert all(any(w in REFUSED[f] for w in ("audio", "multimodal", "embedding", "random_rerank", "text prompts"))
               for f in refused)
    for flag in refused:
        with pytest.raises(KvplanError, match=f"^{flag} is vllm bench serve's but cannot apply here: ") as info:
            parse_bench_extras([flag] if flag == "--enable-multimodal-chat" else [flag, "1"])
        assert "\n" not in str(info.value)


def test_flags_vllm_parses_and_never_reads_are_taken_with_a_note() -> None:
    # vLLM 0.19.1 serve.py adds --use-beam-search and reads it nowhere; datasets.py's --no-stream
    # only stops `datasets.load_dataset` streaming from the Hub
    extras = parse_bench_extras(["--use-beam-search", "--no-stream"])
    assert len(extras.no_effect) == 2 and all("has no effect" in n for n in extras.no_effect)
    assert parse_bench_extras(["--temperature", "0"]).no_effect == ()


def test_dataset_and_plot_flags_take_vllm_s_defaults_and_checks() -> None:
    extras = parse_bench_extras(["--hf-name", "likaixin/InstructCoder", "--hf-split", "test", "--hf-output-len", "9",
                                 "--blazedit-min-distance", "0.2", "--spec-bench-category", "qa",
                                 "--plot-timeline", "--timeline-itl-thresholds", "10", "30"])
    # only the flags typed: a default vLLM fills in is the reader's (blazedit's max 1.0, spec-bench's 256)
    assert extras.hf == {"name": "likaixin/InstructCoder", "split": "test", "output_len": 9, "min_distance": 0.2}
    assert extras.spec_bench == {"category": "qa"}
    assert extras.plot_timeline and extras.itl_thresholds_ms == (10.0, 30.0) and extras.wants_vllm_result
    assert parse_bench_extras(["--plot-timeline"]).itl_thresholds_ms == (25.0, 50.0)  # vLLM's default
    for args, needle in ((["--blazedit-max-distance", "1.5"], "[0, 1]"),
                         (["--blazedit-min-distance", "0.8", "--blazedit-max-distance", "0.5"], "must not exceed"),
                         (["--timeline-itl-thresholds", "50", "25"], "two increasing"),
                         (["--hf-output-len", "-1"], "--hf-output-len must be >= 0")):
        with pytest.raises(KvplanError, match=re.escape(needle)):
            parse_bench_extras(args)


@pytest.mark.parametrize("args, needle", [
    (["--frobnicate", "1"], "no such option '--frobnicate'"),
    (["--temperature", "warm"], "--temperature: invalid float value"),
    (["--backend", "tgi"], "--backend 'tgi'"),
    (["--backend", "openai-chat"], "sends to /v1/chat/completions, not --endpoint /v1/completions"),
    (["--endpoint", "/v1/embeddings"], "--endpoint '/v1/embeddings'"),
    (["--header", "novalue"], "--header takes KEY=VALUE"),
    (["--goodput", "ttft:fast"], "milliseconds"),
    (["--goodput", "latency:10"], "choose from ttft, tpot, e2el"),
    (["--percentile-metrics", "ttft,foo"], "'foo'"),
    (["--metric-percentiles", "0"], "(0, 100]"),
    (["--extra-body", "[1]"], "JSON object"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5"], "both --ramp-up-start-rps and --ramp-up-end-rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "5", "--ramp-up-end-rps", "1"], "must not exceed"),
    (["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "4"], "cannot start at 0"),
    (["--tokenizer-mode", "mistral"], "auto or hf"),
    (["--num-warmups", "-1"], "--num-warmups must be >= 0"),
])
def test_a_bad_value_is_one_line(args: list[str], needle: str) -> None:
    with pytest.raises(KvplanError) as info:
        parse_bench_extras(args)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_values_take_vllm_s_meaning() -> None:
    extras = parse_bench_extras([
        "--base-url", "http://10.0.0.1:9000/", "--endpoint", "/v1/chat/completions", "--backend", "openai-chat",
        "--temperature", "0.7", "--top-k", "5", "--logprobs", "2", "--extra-body", '{"top_k": 9, "x": {"y": 1}}',
        "--header", "x-a=1", "b = two=2", "--goodput", "ttft:500", "e2el:2000", "--metric-percentiles", "50,99.9",
        "--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "16",
        "--input-len", "100", "--output-len", "20", "--num-warmups", "3", "--disable-tqdm"])
    assert extras.target == "http://10.0.0.1:9000" and extras.api == "chat"
    # vLLM: the sampling flags, then --extra-body over them
    assert extras.body == {"temperature": 0.7, "top_k": 9, "logprobs": 2, "x": {"y": 1}}
    assert extras.headers == {"x-a": "1", "b": "two=2"} and extras.goodput_ms == {"ttft": 500.0, "e2el": 2000.0}
    assert extras.metric_percentiles == (50.0, 99.9) and extras.ramp == ("exponential", 1, 16)
    assert (extras.input_len, extras.output_len, extras.num_warmups, extras.progress) == (100, 20, 3, False)
    assert parse_bench_extras(["--host", "::1", "--port", "8001"]).target == "http://[::1]:8001"
    assert parse_bench_extras(["--temperature", "0"]).target is None  # no server flag: kvplan's --target decides


def _recording_app(seen: list[dict]) -> Starlette:
    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "served", "object": "model"}]})

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.append({"body": body, "headers": dict(request.headers)})

        async def events():
            for _ in range(body["max_tokens"]):
                yield f"data: {json.dumps({'choices': [{'index': 0, 'text': ' t', 'finish_reason': None}]})}\n\n"
            usage = {"completion_tokens": body["max_tokens"], "prompt_tokens": len(body["prompt"])}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def profiler(request: Request) -> Response:
        seen.append({"profile": request.url.path})
        return Response()

    return Starlette(routes=[Route("/health", lambda _: Response()), Route("/v1/models", models),
                             Route("/v1/completions", completions, methods=["POST"]),
                             Route("/start_profile", profiler, methods=["POST"]),
                             Route("/stop_profile", profiler, methods=["POST"])])


@pytest.mark.timeout(120)
def test_the_flags_reach_the_server_and_the_result_file(tmp_path: Path) -> None:
    seen: list[dict] = []
    server = ThreadServer(_recording_app(seen))
    server.start()
    try:
        with pytest.raises(SystemExit) as info:
            cli_main(["stress", "--model", "tiny-llama", "--base-url", server.url, "--server-kind", "vllm",
                      "--num-prompts", "4", "--num-warmups", "1", "--random-input-len", "8", "--input-len", "12",
                      "--output-len", "3", "--max-concurrency", "2", "--temperature", "0.7",
                      "--extra-body", '{"foo": 1}', "--header", "x-bench=yes", "--request-id-prefix", "p-",
                      "--lora-modules", "a", "b", "--lora-assignment", "round-robin", "--label", "L",
                      "--metadata", "tp=1", "--result-dir", str(tmp_path / "res"), "--result-filename", "r.json",
                      "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,90", "--goodput", "ttft:60000",
                      "--out", str(tmp_path / "out"), "--no-progress"])
        assert info.value.code == 0
    finally:
        server.stop()
    assert len(seen) == 5  # --num-prompts 4 after one warm-up, as vLLM counts them
    by_index = {int(s["headers"]["x-request-id"].rsplit("-", 1)[1]): s["body"]["model"] for s in seen}
    assert [by_index[i] for i in range(5)] == ["a", "b", "a", "b", "a"]  # round robin by request index
    assert all(s["body"]["temperature"] == 0.7 and s["body"]["foo"] == 1 for s in seen)
    assert all(len(s["body"]["prompt"]) == 12 and s["body"]["max_tokens"] == 3 for s in seen)  # --input-len wins
    assert all(s["headers"]["x-bench"] == "yes" and s["headers"]["x-request-id"].startswith("p-req-") for s in seen)
    result = json.loads((tmp_path / "res" / "r.json").read_text())
    assert result["label"] == "L" and result["tp"] == "1" and result["num_prompts"] == 4
    assert {"p50_ttft_ms", "p90_ttft_ms", "p50_e2el_ms", "p90_e2el_ms"} <= set(result)
    assert not any(k.endswith("_tpot_ms") or k.endswith("_itl_ms") for k in result)  # only the metrics asked for
    assert result["request_goodput"] == pytest.approx(4 / result["duration"])  # every request well inside 60 s


def test_server_flags_without_a_server_are_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["stress", "--model", "tiny-llama", "--num-prompts", "2", "--temperature", "0.5",
                  "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "applies to a server" in err and err.count("\n") == 1


@pytest.mark.slow  # the bundled engine: a few seconds
def test_prefix_repetition_and_a_ramp_on_the_bundled_engine(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["stress", "--model", "tiny-llama", "--dataset-name", "prefix_repetition",
                  "--prefix-repetition-num-prefixes", "2", "--prefix-repetition-prefix-len", "32",
                  "--prefix-repetition-suffix-len", "8", "--output-len", "2", "--num-prompts", "5",
                  "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "50", "--ramp-up-end-rps", "100",
                  "--out", str(tmp_path), "--no-progress"])
    assert info.value.code == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["scenario"]["workload"]["prefix_repetition"] == {
        "prefix_tokens": 32, "suffix_tokens": 8, "num_prefixes": 2, "output_tokens": 2, "shuffle": True}
    assert result["scenario"]["arrival"]["type"] == "ramp"
    assert [r["prompt_tokens"] for r in result["requests"]] == [40] * 4  # 2 x (5 // 2), as vLLM


def test_sonnet_flags_map_onto_the_dataset_as_vllm_maps_them() -> None:
    from kvplan.stress.bench_flags import BenchFlags

    flags = BenchFlags(model="tiny-llama", dataset_name="sonnet", dataset_path="sonnet.txt", num_prompts=4,
                       input_len=400, sonnet={"input_len": 300, "output_len": 50, "prefix_len": 120})
    dataset = flags.scenario(None, "tok-dir", api="chat")["workload"]["dataset"]
    assert dataset["name"] == "sonnet" and dataset["tokenizer"] == "tok-dir"
    # --input-len wins over --sonnet-input-len (vLLM's main maps the general flag onto each dataset's)
    assert (dataset["input_tokens"], dataset["prefix_tokens"], dataset["output_tokens"]) == (400, 120, 50)
    assert dataset["apply_chat_template"] is False  # a chat server formats the bare text itself
    with pytest.raises(KvplanError, match="--sonnet-\\* apply to --dataset-name sonnet"):
        BenchFlags(model="tiny-llama", sonnet={"input_len": 3}).scenario(None)


@pytest.mark.timeout(120)
def test_profile_brackets_the_measured_requests(tmp_path: Path) -> None:
    # vLLM's benchmark: POST /start_profile before the first measured request, /stop_profile after
    # the last (serve.py benchmark(), 0.19.1)
    seen: list[dict] = []
    server = ThreadServer(_recording_app(seen))
    server.start()
    try:
        with pytest.raises(SystemExit) as info:
            cli_main(["stress", "--model", "tiny-llama", "--base-url", server.url, "--server-kind", "vllm",
                      "--num-prompts", "3", "--random-input-len", "8", "--random-output-len", "2", "--profile",
                      "--out", str(tmp_path / "out"), "--no-progress"])
        assert info.value.code == 0
    finally:
        server.stop()
    calls = [s.get("profile", "request") for s in seen]
    assert calls[0] == "/start_profile" and calls[-1] == "/stop_profile" and calls.count("request") == 3
    notes = json.loads((tmp_path / "out" / "result.json").read_text())["notes"]
    assert "--profile: the server's profiler started" in notes and "--profile: the server's profiler stopped" in notes
