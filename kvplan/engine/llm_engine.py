"""`LLMEngine`: requests in, tokens out, one scheduler step at a time.

    engine = LLMEngine.from_profile("tiny-llama", EngineConfig(kv_cache_memory_bytes=64 << 20))
    engine.generate([[1, 2, 3]], SamplingParams(max_tokens=8, temperature=0.0))

For a live workload (the stress harness): `add_request(...)` whenever a request arrives (pass
`arrival_time_s` on the `time.perf_counter()` clock), `step()` in a loop while
`has_unfinished_requests()`; each step returns a `RequestOutput` per request that got a token
(with its sample time; the finishing one carries every token and timestamp) and leaves an
`EngineStats` in `engine.stats`. `abort(request_id)` drops a request and frees its blocks at once.
A request whose step fails (the model or sampler raised for it) finishes with reason "error" and
its `error`; the others go on (kvplan.engine.isolation).
One thread drives an engine: calls are not synchronized.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import replace
from math import ceil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from kvplan.engine.block_manager import BlockManager
from kvplan.engine.config import CPU_DEFAULT_KV_CACHE_MEMORY_BYTES, EngineConfig
from kvplan.engine.isolation import EngineDeadError, describe, run_isolated, swap_blocks
from kvplan.engine.kv_cache import KVCache, kv_dtype_name
from kvplan.engine.model_runner import REFUSED_CONFIG, ModelRunner, random_model, refused_config
from kvplan.engine.outputs import EngineStats, RequestOutput
from kvplan.engine.sampler import Sampler
from kvplan.engine.sampling_params import SamplingParams
from kvplan.engine.scheduler import ScheduledBatch, Scheduler
from kvplan.engine.sequence import Sequence
from kvplan.errors import KvplanError
from kvplan.plan.kv import blocks_in_budget, bytes_per_block
from kvplan.spec.families import MODEL_TYPE
from kvplan.spec.model import ModelSpec, spec_from_config
from kvplan.spec.profiles import load_model, model_config, model_index, model_profile


def _model_dtype(config: EngineConfig) -> torch.dtype:
    return getattr(torch, config.compute_dtype())


def _token_ids(values: Any) -> list[int]:
    """Integers only (numpy's too): `int()` would turn 5.7, True or "7" into a token silently."""
    if isinstance(values, (str, bytes)):
        raise KvplanError(f"prompt token ids must be a list of integers, got {type(values).__name__}")
    out = []
    for t in values:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise KvplanError(f"prompt token ids must be integers, got {t!r} ({type(t).__name__})")
        out.append(int(t))
    return out


class LLMEngine:
    """Paged-attention engine over a transformers causal LM (Llama, Mistral, Qwen2, Qwen3, ...).

    Public attributes: `config`, `spec` (the planner's ModelSpec), `max_model_len`,
    `kv_cache_dtype` (resolved name), `bytes_per_block`, `num_gpu_blocks`, `kv_cache_bytes`,
    `stats` (the last step's `EngineStats`, None before the first step).
    """

    def __init__(
        self, model: PreTrainedModel, config: EngineConfig | None = None, *, spec: ModelSpec | None = None
    ) -> None:
        self.config = config = config or EngineConfig()
        if config.is_cuda and not torch.cuda.is_available():
            raise KvplanError(f"EngineConfig.device={config.device!r} but CUDA is not available; use device='cpu'")
        self.device = torch.device(config.device)
        self._profiled = False  # the warm-up forward (_profile_forward) has run
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]  # transformers types .to() narrowly
        self.spec = spec or spec_from_config(model.config.to_dict(), str(getattr(model.config, MODEL_TYPE, "model")))
        max_pos = self.spec.max_position_embeddings
        self.max_model_len = config.max_model_len or max_pos
        if self.max_model_len > max_pos:
            raise KvplanError(
                f"max_model_len={self.max_model_len} exceeds {self.spec.name}'s max_position_embeddings={max_pos}"
            )
        self.kv_cache_dtype = kv_dtype_name(config.kv_cache_dtype, model.dtype)
        self.bytes_per_block = bytes_per_block(self.spec, config.block_size, self.kv_cache_dtype)
        num_blocks = config.num_gpu_blocks_override or blocks_in_budget(self._kv_budget_bytes(), self.bytes_per_block)
        blocks_per_request = ceil(self.max_model_len / config.block_size)
        if num_blocks < blocks_per_request:
            raise KvplanError(
                f"the KV pool holds {num_blocks} blocks ({num_blocks * config.block_size} tokens) but one request of "
                f"max_model_len={self.max_model_len} needs {blocks_per_request}; raise kv_cache_memory_bytes "
                f"(>= {blocks_per_request * self.bytes_per_block} bytes) or lower max_model_len")
        tier_blocks = blocks_in_budget(config.kv_offloading_bytes, self.bytes_per_block)
        if tier_blocks and not config.enable_prefix_caching:
            raise KvplanError("kv_offloading_bytes needs enable_prefix_caching: the CPU tier is looked up by "
                              "block hash")
        self.kv_cache = KVCache(self.spec, num_blocks, config.block_size, self.kv_cache_dtype, model.dtype, self.device,
                                num_cpu_blocks=blocks_in_budget(config.swap_space_bytes, self.bytes_per_block),
                                num_tier_blocks=tier_blocks)
        self.block_manager = BlockManager(
            num_blocks, config.block_size, enable_prefix_caching=config.enable_prefix_caching,
            reserve_blocks_per_seq=blocks_per_request if config.allocator == "contiguous" else None,
            num_cpu_blocks=self.kv_cache.num_cpu_blocks, num_tier_blocks=tier_blocks)
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=config.max_num_seqs,
                                   max_num_batched_tokens=config.max_num_batched_tokens,
                                   enable_swap=self.kv_cache.num_cpu_blocks > 0)
        self.runner = ModelRunner(self.model, self.kv_cache, Sampler(config.seed), config.num_threads)
        if not self._profiled:  # after the runner set the intra-op threads the steps will use
            self._profile_forward()
        eos = getattr(model.generation_config, "eos_token_id", None) if model.generation_config else None
        eos = eos if eos is not None else getattr(model.config, "eos_token_id", None)
        self.eos_token_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.vocab_size = self.spec.vocab_size
        self.stats: EngineStats | None = None
        self._requests: dict[str, Sequence] = {}
        self._seq_ids = itertools.count()
        self._step = 0
        self._total_preemptions = 0
        self._total_prefix_hit_tokens = 0
        self._total_cpu_hit_tokens = 0
        self._total_computed_prompt_tokens = 0
        self.num_failed_requests = 0  # requests failed by their step (finish_reason "error")

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_profile(cls, name: str, config: EngineConfig | None = None, seed: int = 0) -> LLMEngine:
        """A bundled profile (e.g. "tiny-llama") with random weights drawn under `torch.manual_seed(seed)`."""
        config = config or EngineConfig()
        model = random_model(model_profile(name)["config"], _model_dtype(config), seed)
        return cls(model, config, spec=load_model(name))

    @classmethod
    def from_model(cls, name: str, config: EngineConfig | None = None, *, seed: int = 0,
                   overrides: Mapping[str, Any] | None = None) -> LLMEngine:
        """What `--model` names: a bundled profile (random weights), a local model directory with
        safetensors weights (loaded), or a config.json / weightless directory (random weights).
        `overrides` merge config.json keys over the model's (random weights then, always)."""
        config = config or EngineConfig()
        spec = load_model(name, overrides)  # unknown names and bad configs fail here, in one line
        path = Path(name).expanduser()
        known = name.lower() in model_index()
        if known and not overrides:
            return cls.from_profile(name, config, seed)
        if not known and not overrides and path.is_dir() and any(path.glob("*.safetensors")):
            return cls.from_pretrained(path, config)
        hf = {**model_config(name), **(overrides or {})}
        return cls(random_model(hf, _model_dtype(config), seed, where=spec.source or name), config, spec=spec)

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None) -> LLMEngine:
        """A local model directory (config.json + weights); nothing is downloaded."""
        config = config or EngineConfig()
        spec = load_model(str(Path(path).expanduser()))  # kvplan's schema first: one line for a bad config
        try:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=_model_dtype(config), local_files_only=True)
        except (*REFUSED_CONFIG, OSError) as exc:  # OSError: unreadable or mismatched weight files
            raise refused_config(str(path), exc) from None
        return cls(model, config, spec=spec)

    def _kv_budget_bytes(self) -> int:
        """`kv_cache_memory_bytes`; on CUDA, vLLM's rule (utilization x total - weights, peak
        activations of a max_num_batched_tokens forward, and non-torch memory); else a CPU default."""
        if self.config.kv_cache_memory_bytes:
            return self.config.kv_cache_memory_bytes
        if not self.config.is_cuda:
            return CPU_DEFAULT_KV_CACHE_MEMORY_BYTES
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        self._profile_forward()
        free, total = torch.cuda.mem_get_info(self.device)
        non_torch = total - free - torch.cuda.memory_reserved(self.device)
        budget = (
            int(total * self.config.gpu_memory_utilization) - torch.cuda.max_memory_allocated(self.device) - non_torch
        )
        if budget <= 0:
            raise KvplanError(
                f"no memory left for the KV cache at gpu_memory_utilization={self.config.gpu_memory_utilization}"
            )
        return budget

    def _profile_forward(self) -> None:
        """One forward of min(max_num_batched_tokens, max_model_len) tokens, as vLLM's profile run: on
        CUDA it gives the activation peak; on every device it pays the first-touch costs of a full
        batch (the allocator growing to its activations) before the first real step, which otherwise
        paid them: ci-smoke's first step (8 prompts, 862 tokens) took 62-115 ms cold on CPU, 45-67 ms
        after this (11 runs on one 2-core Intel VM)."""
        n = min(self.config.max_num_batched_tokens, self.max_model_len)
        with torch.inference_mode():
            self.model(
                input_ids=torch.zeros(1, n, dtype=torch.int64, device=self.device), use_cache=False, logits_to_keep=1
            )
        self._profiled = True

    @property
    def num_gpu_blocks(self) -> int:
        return self.block_manager.num_blocks

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_cache.nbytes

    # --- requests -----------------------------------------------------------------------------
    def add_request(self, prompt_token_ids: list[int], sampling_params: SamplingParams | None = None, *,
                    request_id: str | None = None, arrival_time_s: float | None = None) -> str:
        """Queue a request; returns its id. `arrival_time_s` defaults to now (perf_counter)."""
        prompt = _token_ids(prompt_token_ids)
        if not prompt:
            raise KvplanError("a request needs at least one prompt token")
        if len(prompt) >= self.max_model_len:
            raise KvplanError(f"prompt of {len(prompt)} tokens does not fit max_model_len={self.max_model_len} "
                              "(it needs room for at least one generated token)")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise KvplanError(f"prompt token ids must be in [0, {self.vocab_size}); got {min(prompt)}..{max(prompt)}")
        params = sampling_params or SamplingParams()
        seq_id = next(self._seq_ids)
        request_id = str(seq_id) if request_id is None else str(request_id)
        if request_id in self._requests:
            raise KvplanError(f"request id {request_id!r} is already in use")
        seq = Sequence(
            seq_id, request_id, prompt, params, time.perf_counter() if arrival_time_s is None else arrival_time_s
        )
        if params.seed is not None:
            seq.generator = torch.Generator().manual_seed(params.seed)
        self._requests[request_id] = seq
        self.scheduler.add(seq)
        return request_id

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; its blocks are freed at once. False if unknown or done."""
        seq = self._requests.pop(str(request_id), None)
        if seq is None or seq.is_finished:
            return False
        self.scheduler.finish(seq, "abort")
        return True

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    @property
    def num_unfinished_requests(self) -> int:
        s = self.scheduler
        return len(s.waiting) + len(s.running) + len(s.swapped)

    def reset_stats(self) -> None:
        """Counters from zero (after a warm-up): `stats` is None until the next step."""
        self.stats = None
        self._total_preemptions = self._total_prefix_hit_tokens = self._total_cpu_hit_tokens = 0
        self._total_computed_prompt_tokens = 0

    # --- stepping -----------------------------------------------------------------------------
    def _finish_reason(self, seq: Sequence) -> str | None:
        token = seq.token_ids[-1]
        if (not seq.params.ignore_eos and token in self.eos_token_ids) or token in seq.params.stop_token_ids:
            return "stop"
        if seq.num_output_tokens >= seq.params.max_tokens or len(seq) >= self.max_model_len:
            return "length"
        return None

    def step(self) -> list[RequestOutput]:
        """Schedule, run one forward, sample; returns the requests that got a token this step, and
        those whose step failed (finish_reason "error", blocks freed; see kvplan.engine.isolation).
        Raises `EngineDeadError` when the failure cannot be pinned on a request."""
        start = time.perf_counter()
        try:
            batch = self.scheduler.schedule()
        except Exception as exc:  # noqa: BLE001 - queues half-updated: nothing can be trusted
            raise EngineDeadError(f"the scheduler failed: {describe(exc)}") from exc
        for seq in batch.seqs:
            if seq.first_scheduled_time_s is None:
                seq.first_scheduled_time_s = start
        swap_blocks(self.kv_cache, batch)
        self.kv_cache.tier_copy(batch.blocks_to_load, to_tier=False)
        result = run_isolated(self.runner, batch)
        stores, stored_hashes = self.block_manager.take_stores()
        if not result.failed:  # a failed step's blocks hold no K/V to keep
            self.kv_cache.tier_copy(tuple(stores), to_tier=True)
        self.block_manager.stores_done(stored_hashes, ok=not result.failed)
        self._total_cpu_hit_tokens += batch.num_cpu_hit_tokens
        now = time.perf_counter()
        for seq, n in result.ran:
            seq.num_computed_tokens += n
        outputs = []
        for seq, token in result.sampled:
            seq.append_token(token, now)
            reason = self._finish_reason(seq)
            if reason is not None:
                self.scheduler.finish(seq, reason)
                self._requests.pop(seq.request_id, None)
            outputs.append(self._output(seq, token, now))
        for seq, error in result.failed:
            self.block_manager.forget_uncomputed(seq)
            self.scheduler.finish(seq, "error")
            self._requests.pop(seq.request_id, None)
            self.num_failed_requests += 1
            outputs.append(replace(self._output(seq, None, now), error=error))
        self._record_stats(batch, len(result.sampled), start)
        return outputs

    @staticmethod
    def _output(seq: Sequence, token: int | None, now: float) -> RequestOutput:
        done = seq.is_finished
        return RequestOutput(
            seq.request_id,
            () if token is None else (token,),
            () if token is None else (now,),
            seq.num_prompt_tokens,
            seq.num_output_tokens,
            done,
            seq.finish_reason,
            tuple(seq.output_token_ids) if done else (),
            tuple(seq.token_times_s) if done else (),
            seq.arrival_time_s,
            seq.first_scheduled_time_s,
            seq.num_cached_tokens,
            seq.num_preemptions,
        )

    def _record_stats(self, batch: ScheduledBatch, num_generated: int, start: float) -> None:
        bm, s = self.block_manager, self.scheduler
        self._step += 1
        self._total_preemptions += batch.num_preempted
        self._total_prefix_hit_tokens += batch.num_prefix_hit_tokens
        self._total_computed_prompt_tokens += batch.num_computed_prompt_tokens
        decode = sum(1 for n in batch.num_new_tokens if n == 1)
        now = time.perf_counter()
        self.stats = EngineStats(
            step=self._step,
            time_s=now,
            step_time_s=now - start,
            num_running=len(s.running),
            num_waiting=len(s.waiting),
            num_swapped=len(s.swapped),
            num_blocks_total=bm.num_blocks,
            num_blocks_used=bm.num_used_blocks,
            num_blocks_free=bm.num_free_blocks,
            num_blocks_cached=bm.num_cached_blocks,
            num_active_tokens=sum(q.num_computed_tokens for q in s.running),
            kv_bytes_in_use=bm.num_used_blocks * self.bytes_per_block,
            kv_cache_bytes=self.kv_cache_bytes,
            num_scheduled_tokens=batch.num_tokens,
            num_prefill_tokens=batch.num_tokens - decode,
            num_decode_tokens=decode,
            num_generated_tokens=num_generated,
            num_prefix_hit_tokens=batch.num_prefix_hit_tokens,
            num_preemptions=batch.num_preempted,
            num_swapped_out=batch.num_swapped_out,
            num_swapped_in=batch.num_swapped_in,
            total_preemptions=self._total_preemptions,
            total_prefix_hit_tokens=self._total_prefix_hit_tokens,
            total_evicted_blocks=bm.num_evicted_blocks,
            total_cpu_hit_tokens=self._total_cpu_hit_tokens,
            total_computed_prompt_tokens=self._total_computed_prompt_tokens,
        )

    def generate(
        self, prompts: list[list[int]], sampling_params: SamplingParams | list[SamplingParams] | None = None
    ) -> list[list[int]]:
        """Run `prompts` to completion; generated ids per prompt, in input order."""
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise KvplanError(f"got {len(params)} sampling params for {len(prompts)} prompts")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, params)]
        pending, results = set(ids), {}
        while pending:
            if not self.has_unfinished_requests():
                raise KvplanError("requests were dropped before finishing")  # only an abort from elsewhere can do this
            for out in self.step():
                if out.finished and out.request_id in pending:
                    if out.error is not None:
                        raise KvplanError(f"request {out.request_id} failed: {out.error}")
                    pending.discard(out.request_id)
                    results[out.request_id] = list(out.output_token_ids)
        return [results[i] for i in ids]
