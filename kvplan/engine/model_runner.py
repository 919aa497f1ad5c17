"""`ModelRunner`: packs a `ScheduledBatch` into one forward of an unmodified transformers model
with paged attention plugged in, and samples the next tokens."""
from __future__ import annotations

from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from kvplan.engine.attention import ATTN_IMPLEMENTATION, AttentionMetadata
from kvplan.engine.kv_cache import KVCache
from kvplan.engine.sampler import Sampler
from kvplan.engine.scheduler import ScheduledBatch
from kvplan.engine.sequence import Sequence
from kvplan.engine.threads import ThreadChoice, apply_threads
from kvplan.errors import ConfigError
from kvplan.spec.families import MODEL_TYPE

# what transformers raises for a config it refuses: an unknown model type (ValueError), a field of the
# wrong type (huggingface_hub's StrictDataclassError), an unknown activation (KeyError), shapes that
# do not fit (ValueError, TypeError from the layer constructors)
REFUSED_CONFIG = (ValueError, TypeError, KeyError, StrictDataclassError)


def refused_config(where: str, exc: BaseException) -> ConfigError:
    """One line for a config (or checkpoint) transformers will not build a model from."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 240 else text[:237] + "..."
    return ConfigError(f"{where}: transformers cannot build a model from it ({type(exc).__name__}: {text})")


def random_model(hf_config: dict[str, Any], dtype: torch.dtype = torch.float32, seed: int = 0,
                 where: str = "config.json") -> PreTrainedModel:
    """A transformers causal LM from a config.json dict, random weights under `torch.manual_seed(seed)`.
    Keys that describe the checkpoint rather than the architecture are dropped. The config has
    passed kvplan's schema (spec.config_schema) for the keys kvplan reads; transformers checks the
    rest, and what it refuses is one `ConfigError` line."""
    cfg = dict(hf_config)
    for key in ("torch_dtype", "dtype", "architectures", "quantization_config"):
        cfg.pop(key, None)
    try:
        config = AutoConfig.for_model(cfg.pop(MODEL_TYPE, None), **cfg)
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    except REFUSED_CONFIG as exc:
        raise refused_config(where, exc) from None


class ModelRunner:
    def __init__(
        self, model: PreTrainedModel, kv_cache: KVCache, sampler: Sampler, num_threads: int | None = None
    ) -> None:
        # set on purpose: torch's one-thread-per-core default stalls every step when a neighbour holds a core
        self.threads: ThreadChoice = apply_threads(num_threads)
        self.model = model.eval()
        self.kv_cache = kv_cache
        self.sampler = sampler
        self.block_size = kv_cache.block_size
        self.device = next(model.parameters()).device

    def prepare(
        self, batch: ScheduledBatch
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int], list[Sequence]]:
        """-> input_ids [1, T], position_ids [1, T], metadata, rows to sample, sequences sampled."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        sample_seqs: list[Sequence] = []
        bs = self.block_size
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start:start + n])
            positions.extend(range(start, start + n))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            if start + n == len(seq):  # the chunk reaches the last token: its logits give the next one
                sample_rows.append(len(ids) - 1)
                sample_seqs.append(seq)
        meta = AttentionMetadata.build(
            [s.block_table for s in batch.seqs], list(batch.num_new_tokens),
            [s.num_computed_tokens + n for s, n in zip(batch.seqs, batch.num_new_tokens)], slots, bs, self.device)
        input_ids = torch.tensor([ids], dtype=torch.int64, device=self.device)
        position_ids = torch.tensor([positions], dtype=torch.int64, device=self.device)
        return input_ids, position_ids, meta, sample_rows, sample_seqs

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> tuple[list[Sequence], list[int]]:
        """Copy swapped blocks, run the forward, and sample. -> (sequences that got a token, tokens)."""
        self.kv_cache.swap_out(batch.blocks_to_swap_out)  # before anything reuses the freed device blocks
        self.kv_cache.swap_in(batch.blocks_to_swap_in)
        if not batch.seqs:
            return [], []
        input_ids, position_ids, meta, rows, seqs = self.prepare(batch)
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = ATTN_IMPLEMENTATION  # only for this call: the model stays usable as is
        try:
            out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                             logits_to_keep=torch.tensor(rows, dtype=torch.int64, device=self.device),
                             attn_metadata=meta, kv_cache=self.kv_cache)
        finally:
            config._attn_implementation = previous
        if not seqs:
            return [], []
        logits = out.logits[0]  # [len(rows), V]
        return seqs, self.sampler(logits, [s.params for s in seqs], [s.generator for s in seqs])
