"""`RecurrentState`: the fixed-size cache of a Mamba / Gated-DeltaNet / linear-attention layer.

A state layer caches no tokens: each running request holds one conv state and (except short
conv) one SSM / recurrent state per layer, whatever its length. The shapes follow vLLM's
`MambaStateShapeCalculator` (vllm/model_executor/layers/mamba/mamba_utils.py) and the dtypes its
`MambaStateDtypeCalculator`: the conv state in the model dtype (`--mamba-cache-dtype auto`), the
SSM state in the model dtype too unless the checkpoint names one (Qwen3.5 `mamba_ssm_dtype`,
Nemotron-H `mamba_ssm_cache_dtype`, whose vLLM default is float16).

Shapes per TP rank (SD layout; the element count is the same in DS):
    mamba1      conv (k-1, I/tp)                        ssm (I/tp, N)
    mamba2      conv (k-1, (I + 2 G' N)/tp)             ssm (H/tp, P, N)   G' = G extended to a multiple of tp
    gdn         conv (k-1, (2 nk dk + nv dv)/tp)        ssm (nv/tp, dv, dk)
    kda         conv (k-1, 3 H d/tp) (q, k and v)       ssm (H/tp, d, d) float32 (Kimi-Linear)
    linear      -                                       ssm (H/tp, d, d)         (MiniMax lightning attention)
    short_conv  conv (k-1, I/tp)                        -                        (LFM2: I = conv_dim, k = conv_L_cache)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kvplan.spec.cache.kind import CacheKind, Tokens
from kvplan.spec.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype

if TYPE_CHECKING:
    from kvplan.spec.dtypes import KvDtype

StateKind = Literal["mamba1", "mamba2", "gdn", "kda", "linear", "short_conv"]


@dataclass(frozen=True)
class RecurrentState(CacheKind):
    """One layer's recurrent state, before tensor parallelism (see the module doc for shapes). Its
    page in the pool is padded to the attention page by the pool's hybrid rule (kvplan.plan.kv)."""

    kind = "state"
    per_token = False
    attention = False
    paged = False
    mixer: StateKind
    conv_channels: int  # mamba1/short_conv: I; mamba2: I (groups added per rank); gdn: 2 nk dk + nv dv; linear: 0
    conv_kernel: int  # k (the conv state keeps k - 1 steps)
    heads: int  # mamba2: H; gdn: nv; linear: H; mamba1: I (one "head" per channel)
    head_dim: int  # mamba2: P; gdn: dv; linear: d; mamba1: 1
    state_size: int  # mamba1/mamba2: N; gdn: dk; linear: d
    groups: int = 0  # mamba2: G (B and C groups)
    ssm_dtype: str | None = None  # None: the model dtype

    def _groups_per_tp(self, tp: int) -> int:
        """vLLM's `extra_groups_for_head_shards`: groups replicated so every head shard has its group."""
        return self.groups if self.groups % tp == 0 else tp

    def split_error(self, tp: int) -> str | None:
        """Why this state cannot be split over `tp` ranks (vLLM's `divide` asserts), or None."""
        channels = self.conv_elements_total(tp)
        if self.heads % tp or channels % tp:
            return f"{self.mixer} state: {self.heads} heads and {channels} conv channels must divide by --tp {tp}"
        return None

    def conv_elements_total(self, tp: int) -> int:
        """Conv channels of all ranks (mamba2 counts the groups replicated for `tp`)."""
        if self.mixer == "mamba2":
            return self.conv_channels + 2 * self._groups_per_tp(tp) * self.state_size
        return self.conv_channels

    def conv_elements(self, tp: int = 1) -> int:
        if self.mixer == "linear":
            return 0
        return self.conv_elements_total(tp) // tp * (self.conv_kernel - 1)

    def ssm_elements(self, tp: int = 1) -> int:
        if self.mixer == "short_conv":
            return 0
        return self.heads // tp * self.head_dim * self.state_size

    def bytes_per_request(self, model_dtype: str, tp: int = 1) -> int:
        """vLLM's `MambaSpec.page_size_bytes` before padding: conv and SSM state of one request, one rank."""
        conv_bytes = MODEL_DTYPE_BYTES[normalize_model_dtype(model_dtype)]
        ssm_bytes = MODEL_DTYPE_BYTES[normalize_model_dtype(self.ssm_dtype)] if self.ssm_dtype else conv_bytes
        return self.conv_elements(tp) * conv_bytes + self.ssm_elements(tp) * ssm_bytes

    def entry_bytes(self, kv_dtype: KvDtype, tp: int) -> int:
        return 0  # nothing per token: `bytes_per_request` is the whole of it

    def kept_tokens(self, tokens: Tokens, chunk: int = 1) -> Tokens:
        return tokens * 0

    def request_bytes(self, tokens: int, block_size: int, kv_dtype: KvDtype, tp: int, *, paged: bool = True) -> int:
        return 0  # charged per request by the pool's rule (unpadded or padded pages, copies)

    def pool_blocks(self, max_model_len: Tokens, max_num_batched_tokens: int, block_size: int) -> Tokens:
        return max_model_len * 0 + 1

    def describe(self, count: int, tokens: int, model_dtype: str) -> str:
        return (
            f"{count} {self.mixer} state layers: no KV per token; a fixed {self.bytes_per_request(model_dtype):,} B "
            "(conv + recurrent state) per request each, however long"
        )
