"""Property-based fuzzing of the `kvplan` command line: every command with generated argument
lists (good values, hostile numbers, hostile paths, garbage), run in-process (see harness.py for
the invariants checked on every case)."""
from __future__ import annotations

import pytest
from harness import FUZZ, examples, invoke, workspace
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # the slow lane (pytest -m slow): .ci/run runs it after the default lane

BAD_INTS = ["0", "-1", "-5", "1.5", "18446744073709551616", "abc", "", "nan", "inf", "1e308", "9" * 400, " 7", "0x10"]
BAD_FLOATS = ["0", "-1", "nan", "inf", "-inf", "1e-300", "1e308", "abc", "", "1e400", "-0"]
WORDS = ["", "x" * 5000, "ü", "../../etc/passwd", "a,b,,c", "\t", "-", "--", "NaN", "null", "{}", "[]", "%s%n"]
# paths relative to the workspace (the working directory); `fifo`, `adir`, `afile.txt` exist there
OUT_PATHS = ["out/new.html", "new.json", "missing/deep/x.xml", "adir", "afile.txt", "fifo", "/dev/null", "/dev/full",
             "/proc/kvplan/x", "/sys/x.json", "model/config.json/x", "", "a.unknownext", "x.png", "x.svg"]
IN_RESULTS = [
    "result.json",
    "result.json",
    "result.json",
    "afile.txt",
    "adir",
    "fifo",
    "/dev/zero",
    "missing.json",
    "scenario.yaml",
    "model/config.json",
]
MODELS = ["tiny-llama", "llama-2-7b", "gpt2", "deepseek-v3", "gemma-2-9b", "model", "tiny-llama", "llama-2-7b", "model",
          "model/config.json", "afile.txt",
          "adir", "fifo", "/dev/null", "nope", "org/repo", "org/repo@rev", "x" * 300, ""]
SCENARIOS = [
    "ci-smoke",
    "mixed",
    "scenario.yaml",
    "ci-smoke",
    "scenario.yaml",
    "afile.txt",
    "adir",
    "fifo",
    "missing.yaml",
    "/dev/zero",
    "result.json",
]


def pool(good: list[str], bad: list[str] = ()) -> st.SearchStrategy[str]:
    """Mostly good values (so cases get past the first check), else hostile ones and random text."""
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), st.sampled_from(good),
                     st.sampled_from(list(bad) + WORDS), st.text(max_size=12))


INT = pool(["1", "8", "16", "4096", "32768"], BAD_INTS)
FLOAT = pool(["0.9", "0.5", "1", "24", "80"], BAD_FLOATS)
DTYPE = pool(["auto", "float16", "bfloat16", "float32"], ["fp8", "int4", "float64"])
KV_DTYPE = pool(["auto", "fp8", "float16", "int4", "int8", "fp8_e5m2"], ["fp4", "float64"])
GPU = pool(["h100", "rtx-4090", "a100-80gb", "h100,rtx-4090"], ["nope", ","])
OUT = st.sampled_from(OUT_PATHS)
LIST_INTS = pool(["1024,2048", "16", "1,8", "4096"], ["1,-1", "18446744073709551616", "0", ",", "1" * 30, "2147483648",
                                                      ",".join(["7"] * 5000)])
TOLERANCE = pool(
    ["p99_itl_ms=+15%", "peak_kv_bytes=exact", "output_throughput=-20%", "mean_ttft_ms=5%"],
    ["p99_itl_ms=-0%", "p99_itl_ms=+0%", "p99_itl_ms=nan%", "p99_itl_ms=+1e400%", "x=1%", "=", "p99_itl_ms="],
)

# command -> (positional strategies, {option: value strategy or None for a flag})
COMMANDS: dict[str, tuple[list, dict]] = {
    "estimate": (
        [],
        {
            "--model": st.sampled_from(MODELS),
            "--ctx": INT,
            "--concurrency": INT,
            "--kv-cache-dtype": KV_DTYPE,
            "--block-size": INT,
            "--tp": INT,
            "--pp": INT,
            "--dtype": DTYPE,
            "--prefix-tokens": INT,
            "--max-model-len": INT,
            "--gpu": GPU,
            "--gpu-memory-gib": FLOAT,
            "--gpu-memory-utilization": FLOAT,
            "--quantization": pool(["fp8", "awq"], ["nope"]),
            "--max-num-seqs": INT,
            "--max-num-batched-tokens": INT,
            "--kv-cache-memory-bytes": INT,
            "--enforce-eager": None,
            "--vllm-version": pool(["0.10.0", "0.28.0"], ["9.9", "x.y"]),
            "--target-concurrency": INT,
            "--json": None,
        },
    ),
    "sweep": (
        [],
        {
            "--model": st.sampled_from(MODELS),
            "--ctx": LIST_INTS,
            "--concurrency": LIST_INTS,
            "--kv-cache-dtype": pool(["auto,fp8", "fp8"], ["nope", ","]),
            "--block-size": LIST_INTS,
            "--gpu": GPU,
            "--tp": INT,
            "--pp": INT,
            "--dtype": DTYPE,
            "--gpu-memory-utilization": FLOAT,
            "--vllm-version": pool(["0.28.0"], ["x"]),
            "--csv": OUT,
            "--plot": OUT,
        },
    ),
    "gpus": ([], {"--json": None}),
    "profiles": ([], {}),
    "profiles show": ([st.sampled_from(MODELS)], {"--json": None}),
    "scenarios": ([], {}),
    "report": ([st.sampled_from(IN_RESULTS), st.sampled_from(IN_RESULTS)], {"-o": OUT}),
    "gate": (
        [],
        {
            "--result": st.sampled_from(IN_RESULTS),
            "--baseline": st.sampled_from(IN_RESULTS),
            "--junit": OUT,
            "--html": OUT,
            "--tolerance": TOLERANCE,
            "--prediction-tolerance": TOLERANCE,
        },
    ),
    "baseline update": (
        [st.sampled_from(IN_RESULTS)],
        {"--dir": st.sampled_from(OUT_PATHS + ["baselines"]), "--force": None},
    ),
    "stress": (
        [],
        {
            "--scenario": st.sampled_from(SCENARIOS),
            "--out": st.sampled_from(OUT_PATHS + ["run1"]),
            "--force": None,
            "--allocator": pool(["paged", "contiguous", "both"]),
            "--no-progress": None,
            "--calibration": st.sampled_from(IN_RESULTS),
            "--calibrate": None,
            "--target": pool(["http://127.0.0.1:9", "https://[::1]:1/v1"], ["ftp://x", "http://", "://"]),
            "--api": pool(["completions", "chat"]),
            "--served-model-name": pool(["m"]),
            "--api-key-env": pool(["KVPLAN_FUZZ_KEY"]),
            "--timeout-s": FLOAT,
        },
    ),
    "calibrate": (
        [],
        {
            "--scenario": st.sampled_from(SCENARIOS),
            "--model": st.sampled_from(MODELS),
            "--device": pool(["cpu", "cuda", "cuda:0"], ["tpu", "cuda:-1", "cuda:x"]),
            "--out": OUT,
        },
    ),
    "serve": (
        [],
        {
            "--model": st.sampled_from(MODELS),
            "--port": INT,
            "--block-size": INT,
            "--max-num-seqs": INT,
            "--max-model-len": INT,
            "--kv-cache-dtype": KV_DTYPE,
            "--kv-cache-memory-bytes": INT,
            "--gpu-memory-utilization": FLOAT,
            "--device": pool(["cpu", "cuda"], ["tpu"]),
            "--dtype": DTYPE,
            "--header-timeout-s": FLOAT,
            "--body-timeout-s": FLOAT,
            "--max-request-bytes": INT,
            "--max-connections": INT,
            "--api-key": pool(["k"]),
        },
    ),
}


# commands without options have little to fuzz (and `profiles` loads every profile): drawn less often
LIGHT = {"gpus": 1, "profiles": 1, "scenarios": 1, "profiles show": 2}
WEIGHTED = [name for name in sorted(COMMANDS) for _ in range(LIGHT.get(name, 4))]

REQUIRED = {"estimate": "--model", "sweep": "--model", "serve": "--model", "gate": "--result", "stress": "--scenario"}


@st.composite
def command_line(draw) -> list[str]:
    name = draw(st.sampled_from(WEIGHTED))
    positional, options = COMMANDS[name]
    args = name.split()
    chosen = draw(st.lists(st.sampled_from(sorted(options)), max_size=5, unique=True)) if options else []
    required = REQUIRED.get(name)
    if required and required not in chosen and draw(st.integers(0, 9)):
        chosen.insert(0, required)
    for flag in chosen:
        args.append(flag)
        if options[flag] is not None:
            args.append(draw(options[flag]))
    for strategy in positional[: draw(st.sampled_from([1, 1, 1, 0, 2]))] if name == "report" else positional:
        args.append(draw(strategy))
    if draw(st.integers(0, 9)) == 0:  # now and then a stray word, flag or --help anywhere
        args.insert(
            draw(st.integers(0, len(args))), draw(st.sampled_from(["--help", "--nope", "-x", "extra", "--", "-V"]))
        )
    return args


@pytest.fixture
def fast_report(monkeypatch):
    """The HTML renderer stubbed out (~1 s a page): these cases are about arguments and paths;
    test_fuzz_files.py renders real pages from hostile result files."""
    import kvplan.report.html as html

    monkeypatch.setattr(html, "render_report", lambda results: "<!doctype html><title>fuzz</title>")


@settings(FUZZ, max_examples=examples(360))
@given(args=command_line())
def test_every_command_line(fast_report, args: list[str]) -> None:
    with workspace() as ws:
        invoke(ws, args)
