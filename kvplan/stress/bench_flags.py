"""`vllm bench serve`'s load flags on `kvplan stress`: a scenario built from flags, or a scenario
file with some of its settings replaced by them.

Mapping (vLLM's semantics, kvplan's scenario fields):
- `--dataset-name random` (the default with no scenario): one class, prompt and output lengths
  uniform in len x [1 - r, 1 + r] (`--random-range-ratio`), after a shared `--random-prefix-len`
  prefix (kvplan's prompt_tokens counts the prefix, vLLM's input len does not, so it is added);
  `sharegpt`, `custom`, `burstgpt`, `sonnet`, `hf`, `spec_bench` with `--dataset-path`:
  `workload.dataset` (`kvplan/workload/datasets/`).
- `--num-prompts` -> num_requests (vLLM's default 1000 for a new scenario).
- `--request-rate inf` (vLLM's default) sends everything at once: with `--max-concurrency N` at
  most N in flight, which is a closed loop of N users; without, a closed loop of num_prompts.
  A finite rate is Poisson (gamma gaps with `--burstiness`), capped by `--max-concurrency`.
  Any of these three flags replaces the scenario's whole arrival section.
- `--seed` -> seed (lengths, dataset shuffle, arrivals).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.workload.datasets.random_dataset import check_range_ratio
from kvplan.workload.datasets.ref import DATASET_NAMES

DATASETS = ("random", *DATASET_NAMES, "prefix_repetition")
SYNTHETIC = ("random", "prefix_repetition")  # no --dataset-path
VLLM_NUM_PROMPTS = 1000  # vllm bench serve's defaults
VLLM_RANDOM_INPUT_LEN, VLLM_RANDOM_OUTPUT_LEN = 1024, 128
RANDOM_FLAGS = ("random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len")
ARRIVAL_FLAGS = ("request_rate", "burstiness", "max_concurrency")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class BenchFlags:
    model: str | None = None
    dataset_name: str | None = None
    dataset_path: str | None = None
    num_prompts: int | None = None
    request_rate: float | None = None  # requests/s; inf: all at once
    burstiness: float | None = None
    max_concurrency: int | None = None
    random_input_len: int | None = None
    random_output_len: int | None = None
    random_range_ratio: float | None = None
    random_prefix_len: int | None = None
    sharegpt_output_len: int | None = None
    custom_output_len: int | None = None
    seed: int | None = None
    # the rest of vllm bench serve's load flags (bench_serve_flags.BenchExtras)
    input_len: int | None = None  # wins over --random-input-len (vLLM maps it onto each dataset's)
    output_len: int | None = None  # wins over each dataset's output length
    num_warmups: int | None = None
    ramp: tuple[str, int, int] | None = None  # (linear|exponential, start rps, end rps)
    prefix_repetition: dict[str, int] | None = None  # prefix_len, suffix_len, num_prefixes, output_len
    disable_shuffle: bool = False
    sonnet: dict[str, int] | None = None  # input_len, output_len, prefix_len
    hf: dict[str, Any] | None = None  # name, subset, split, output_len, min_distance, max_distance
    spec_bench: dict[str, Any] | None = None  # output_len, category
    skip_chat_template: bool = False
    no_oversample: bool = False

    def given(self) -> list[str]:
        """The flags set, as the user typed them."""
        return [_flag(f.name) for f in fields(self) if getattr(self, f.name) not in (None, False, {})]

    def _check(self, has_scenario: bool) -> str | None:
        """The dataset these flags choose (None: the scenario's own workload stays)."""
        name = self.dataset_name
        if name is not None and name not in DATASETS:
            raise KvplanError(f"--dataset-name {name!r}: choose one of {', '.join(DATASETS)}")
        randoms = [_flag(f) for f in RANDOM_FLAGS if getattr(self, f) is not None]
        if self.sonnet and name != "sonnet":
            raise KvplanError("--sonnet-* apply to --dataset-name sonnet")
        if self.hf and name != "hf":
            raise KvplanError("--hf-* and --blazedit-* apply to --dataset-name hf")
        if self.spec_bench and name != "spec_bench":
            raise KvplanError("--spec-bench-* apply to --dataset-name spec_bench")
        if self.prefix_repetition and name != "prefix_repetition":
            raise KvplanError("--prefix-repetition-* apply to --dataset-name prefix_repetition")
        if name is None and (randoms or self.dataset_path is not None or not has_scenario):
            name = "random" if self.dataset_path is None else None
            if name is None:
                raise KvplanError(f"--dataset-path needs --dataset-name ({', '.join(DATASET_NAMES)})")
        if name in SYNTHETIC and self.dataset_path is not None:
            raise KvplanError(f"--dataset-path applies to --dataset-name {', '.join(DATASET_NAMES)}, not {name}")
        if name not in (None, "random") and randoms:
            raise KvplanError(f"{', '.join(randoms)} apply to --dataset-name random, not {name}")
        if name not in (None, *SYNTHETIC) and self.dataset_path is None:
            raise KvplanError(f"--dataset-name {name} needs --dataset-path (the {name} file)")
        if self.sharegpt_output_len is not None and name != "sharegpt":
            raise KvplanError("--sharegpt-output-len applies to --dataset-name sharegpt")
        if self.custom_output_len is not None and name != "custom":
            raise KvplanError("--custom-output-len applies to --dataset-name custom")
        if self.random_range_ratio is not None:
            check_range_ratio(self.random_range_ratio)
        if self.request_rate is not None and not (self.request_rate > 0):  # NaN fails too
            raise KvplanError(f"--request-rate must be a positive number of requests/s or inf, got {self.request_rate}")
        return name

    def _dataset(self, name: str, tokenizer: str | None, api: str) -> dict[str, Any]:
        """The scenario's workload.dataset for a file dataset (sharegpt, custom, ..., hf, spec_bench)."""
        assert self.dataset_path is not None, "checked with the flags"
        local = Path(self.dataset_path).expanduser()
        # an hf path that is not on disk is a repo id (hf_files.resolve looks in the cache)
        path = str(local.absolute()) if name != "hf" or local.exists() else self.dataset_path
        dataset: dict[str, Any] = {"name": name, "path": path}
        sonnet, hf, spec = self.sonnet or {}, self.hf or {}, self.spec_bench or {}
        output = (self.output_len or self.sharegpt_output_len or self.custom_output_len or sonnet.get("output_len")
                  or hf.get("output_len") or spec.get("output_len"))
        for key, value in (("hf_name", hf.get("name")), ("hf_subset", hf.get("subset")),
                           ("hf_split", hf.get("split")), ("min_distance", hf.get("min_distance")),
                           ("max_distance", hf.get("max_distance")), ("category", spec.get("category"))):
            if value is not None:
                dataset[key] = value
        if self.skip_chat_template:
            dataset["chat_template"] = False
        if self.no_oversample:
            dataset["oversample"] = False
        if self.disable_shuffle:
            dataset["shuffle"] = False
        if name in ("hf", "spec_bench", "sonnet"):  # sent chat-formatted to /v1/completions, bare to chat
            dataset["apply_chat_template"] = api != "chat"
        if output is not None:
            dataset["output_tokens"] = output
        if name == "sonnet":  # --input-len wins over --sonnet-input-len, as vLLM maps it
            for key, value in (("input_tokens", self.input_len or sonnet.get("input_len")),
                               ("prefix_tokens", sonnet.get("prefix_len"))):
                if value is not None:
                    dataset[key] = value
        if tokenizer is not None:
            dataset["tokenizer"] = tokenizer
        return dataset

    def _workload(self, name: str, tokenizer: str | None, api: str = "completions") -> dict[str, Any]:
        if name == "prefix_repetition":
            given = self.prefix_repetition or {}
            repetition: dict[str, Any] = {key: given[flag] for key, flag in (
                ("prefix_tokens", "prefix_len"), ("suffix_tokens", "suffix_len"), ("num_prefixes", "num_prefixes"),
                ("output_tokens", "output_len")) if flag in given}
            if self.output_len is not None:
                repetition["output_tokens"] = self.output_len
            if self.disable_shuffle:
                repetition["shuffle"] = False
            return {"prefix_repetition": repetition}
        if name != "random":
            return {"dataset": self._dataset(name, tokenizer, api)}
        prefix = self.random_prefix_len or 0
        ratio = self.random_range_ratio or 0.0

        def length(mean: int, offset: int = 0) -> Any:
            # vLLM: integers uniform in [floor(len * (1 - r)), ceil(len * (1 + r))]
            if ratio == 0:
                return mean + offset
            return {"dist": "uniform", "min": max(1, math.floor(mean * (1 - ratio))) + offset,
                    "max": math.ceil(mean * (1 + ratio)) + offset}

        cls: dict[str, Any] = {
            "name": "random",
            "prompt_tokens": length(self.input_len or self.random_input_len or VLLM_RANDOM_INPUT_LEN, prefix),
            "output_tokens": length(self.output_len or self.random_output_len or VLLM_RANDOM_OUTPUT_LEN),
        }
        if prefix:
            cls["shared_prefix"] = {"id": "random-prefix", "tokens": prefix}
        return {"classes": [cls]}

    def _arrival(self, num_requests: int | None) -> dict[str, Any]:
        rate = self.request_rate if self.request_rate is not None else math.inf
        if self.ramp is not None:
            if not math.isinf(rate):  # vLLM's words: the ramp controls the rate
                raise KvplanError("with --ramp-up-strategy do not give --request-rate: the ramp sets the rate")
            strategy, start, end = self.ramp
            ramp: dict[str, Any] = {"type": "ramp", "strategy": strategy, "start_rate_per_s": start,
                                    "end_rate_per_s": end}
            if self.burstiness is not None:
                ramp["burstiness"] = self.burstiness
            if self.max_concurrency is not None:
                ramp["max_concurrency"] = self.max_concurrency
            return ramp
        if math.isinf(rate):
            if self.burstiness is not None:
                raise KvplanError("--burstiness shapes the gaps of a finite --request-rate; with rate inf every "
                                  "request is sent at once")
            if self.max_concurrency is None and num_requests is None:
                raise KvplanError("--request-rate inf sends all of --num-prompts at once: give --num-prompts "
                                  "(the scenario runs for a duration), a finite --request-rate or --max-concurrency")
            return {"type": "concurrency", "concurrency": self.max_concurrency or num_requests}
        arrival: dict[str, Any] = {"type": "poisson", "rate_per_s": rate}
        if self.burstiness is not None:
            arrival["burstiness"] = self.burstiness
        if self.max_concurrency is not None:
            arrival["max_concurrency"] = self.max_concurrency
        return arrival

    def scenario(self, base: dict[str, Any] | None, tokenizer: str | None = None,
                 api: str = "completions") -> dict[str, Any]:
        """A scenario mapping: `base` (a scenario file's, as `Scenario.to_dict()` gives it) with the
        flags' settings in place, or a new one from the flags alone (`--model` then needed)."""
        name = self._check(base is not None)
        data = dict(base) if base is not None else {}
        if base is None:
            if self.model is None:
                raise KvplanError("give --scenario (a file or a bundled name) or --model with vllm bench serve's "
                                  "load flags (--dataset-name, --num-prompts, --request-rate, ...)")
            data["name"] = f"bench-{name}"
            data["description"] = "built from the command line: " + " ".join(self.given())
        if self.model is not None:
            data["model"] = {"name": self.model}
        if name is not None:
            data["workload"] = self._workload(name, tokenizer, api)
        if self.num_prompts is not None or base is None:
            data["num_requests"] = self.num_prompts or VLLM_NUM_PROMPTS
            data.pop("duration_s", None)
            if data.get("warmup_requests", 0) >= data["num_requests"]:
                data.pop("warmup_requests")
        if self.num_warmups:  # vLLM sends them before its --num-prompts and counts none of them
            data["warmup_requests"] = self.num_warmups
            if "num_requests" in data:
                data["num_requests"] += self.num_warmups
        if base is None or self.ramp is not None or any(getattr(self, f) is not None for f in ARRIVAL_FLAGS):
            data["arrival"] = self._arrival(data.get("num_requests"))
        if self.seed is not None:
            data["seed"] = self.seed
        return data
