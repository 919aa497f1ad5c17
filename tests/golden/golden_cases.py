"""The commands whose outputs are kept as golden files (tests/data/golden/): `estimate`, `predict`
and `plan` as JSON, and the prediction `kvplan stress` makes before each bundled scenario runs.

A refactor must leave every one identical. A change that means to alter an answer regenerates
them (`KVPLAN_UPDATE_GOLDEN=1 pytest tests/golden`) and says so in its commit.
"""
from __future__ import annotations

ESTIMATE = {
    "llama-2-7b-rtx-4090": ["--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8", "--gpu", "rtx-4090"],
    "llama-2-7b-no-gpu": ["--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "8"],
    "llama-2-7b-target-32": ["--model", "llama-2-7b", "--ctx", "4096", "--concurrency", "32", "--gpu", "rtx-4090",
                             "--target-concurrency", "32"],
    "llama-3.1-70b-h100-tp4-fp8": ["--model", "llama-3.1-70b", "--ctx", "32768", "--concurrency", "16", "--gpu", "h100",
                                   "--tp", "4", "--kv-cache-dtype", "fp8"],
    "deepseek-v3.2-h200-tp8": ["--model", "deepseek-v3.2", "--ctx", "65536", "--concurrency", "32", "--gpu", "h200",
                               "--tp", "8"],
    "qwen3-next-h200-tp2": ["--model", "qwen3-next-80b-a3b-thinking", "--ctx", "131072", "--concurrency", "8",
                            "--gpu", "h200", "--tp", "2"],
    "qwen3.5-35b-a3b-h100": ["--model", "qwen3.5-35b-a3b", "--ctx", "32768", "--concurrency", "16", "--gpu", "h100"],
    "gemma-4-26b-a4b-h100": ["--model", "gemma-4-26b-a4b", "--ctx", "16384", "--concurrency", "16", "--gpu", "h100"],
    "qwen3-vl-8b-l40s": ["--model", "qwen3-vl-8b-instruct", "--ctx", "8192", "--concurrency", "8", "--gpu", "l40s"],
    "jamba-mini-a100": ["--model", "ai21-jamba-1.5-mini", "--ctx", "65536", "--concurrency", "4", "--gpu", "a100-80gb",
                        "--tp", "2"],
    "gpt-oss-120b-h100": ["--model", "gpt-oss-120b", "--ctx", "32768", "--concurrency", "64", "--gpu", "h100"],
    "mixtral-pp2-gib": ["--model", "mixtral-8x7b-v0.1", "--ctx", "8192", "--concurrency", "8", "--gpu-memory-gib", "48",
                        "--pp", "2", "--tp", "2", "--max-num-seqs", "64"],
    "llama-3.1-8b-kv-bytes": ["--model", "llama-3.1-8b-instruct", "--ctx", "8192", "--concurrency", "4",
                              "--kv-cache-memory-bytes", "4294967296"],
}

# Pinned to the roofline: the default (auto) times with the kernel tables where the extra is installed.
PREDICT = {
    "llama-3.1-8b-h100": ["--model", "llama-3.1-8b-instruct", "--gpu", "h100", "--num-prompts", "200",
                          "--request-rate", "8",
        "--perf-model", "roofline"],
    "llama-3.1-70b-a100-tp4": ["--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "4", "--num-prompts", "200",
                               "--random-input-len", "2000", "--random-output-len", "200", "--max-concurrency", "32",
        "--perf-model", "roofline"],
    "qwen3-30b-a3b-h200-fp8kv": ["--model", "qwen3-30b-a3b", "--gpu", "h200", "--kv-cache-dtype", "fp8",
                                 "--num-prompts", "300", "--request-rate", "inf", "--random-range-ratio", "0.5",
        "--perf-model", "roofline"],
    "llama-3.1-8b-scenario-mixed": ["--model", "llama-3.1-8b-instruct", "--gpu", "l40s", "--scenario", "mixed",
        "--perf-model", "roofline"],
}

PLAN = {
    "llama-3.1-8b-two-gpus": ["--model", "llama-3.1-8b-instruct", "--request-rate", "6", "--slo-ttft-ms", "1000",
                              "--slo-tpot-ms", "60", "--gpu", "h100,l40s", "--num-prompts", "150"],
}

SCENARIOS = ("ci-smoke", "long-context", "mixed", "paged-vs-contiguous", "shared-prefix", "short-chat")
