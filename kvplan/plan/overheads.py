"""What vLLM subtracts before the KV cache: weights as loaded, peak activation of the profiling
run, non-torch growth and (v0.21+) the CUDA-graph estimate. Modelled, not tabulated.

Every coefficient below is global (no per-model constant) and was fitted on real vLLM start-up
logs (vLLM 0.19.0, H100-80GB, Llama-3.1-8B and Qwen2.5-7B, TP 1/2/4, bf16/fp16/fp32);
`benchmarks/vllm_accuracy.py` replays those logs and checks them. The structure follows vLLM's
own accounting: `gpu_memory_utilization` caps what the engine may use, and the profiling run
measures what is taken before the KV cache.

Pure Python (no numpy): `kvplan estimate` imports it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from math import ceil

from kvplan.errors import KvplanError
from kvplan.plan.kv import pp_layer_range
from kvplan.spec.dtypes import MODEL_DTYPE_BYTES
from kvplan.spec.model import ModelSpec
from kvplan.spec.quant import make_quant
from kvplan.units import GIB

# --- vLLM versions -------------------------------------------------------------------------
DEFAULT_VLLM_VERSION = "0.28.0"  # newest behaviour modelled (it added the >= 160 GiB batch tier)
V1_SINCE = (0, 8, 0)  # V1 engine default; earlier: V0 block accounting, V0 batch defaults
ASYNC_SCHEDULING_SINCE = (0, 14, 0)  # V1 schedules step N+1 while step N runs, on by default
NEW_ACTIVATION_SINCE = (0, 17, 0)  # the sampler/profile-run peak dropped ~2.5x in vLLM 0.17
CUDAGRAPH_SUBTRACTED_SINCE = (0, 21, 0)  # PR #30515 estimate on by default
TOKENS_FROM_CONCURRENCY_SINCE = (0, 20, 0)  # `int(max_concurrency x max_model_len)` token line (after 0.19)
MODEL_S_WORDING_SINCE = (0, 12, 0)  # "model's" instead of "models's" in the max-seq-len error
BIG_GPU_TIER_SINCE = (0, 28, 0)  # >=160 GiB devices: server max_num_batched_tokens 16384
V1_HYBRID_ALLOCATOR_SINCE = (0, 10, 0)  # Mamba state in the V1 block pool, block size unified with attention


def parse_vllm_version(version: str) -> tuple[int, int, int]:
    """'0.19.0' -> (0, 19, 0); '0.6.5.dev (V0 ...)' -> (0, 6, 5); 'v0.21' -> (0, 21, 0)."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not m:
        raise KvplanError(f"--vllm-version {version!r} is not a version like 0.19.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def schedules_async_by_default(vllm_version: str) -> bool:
    """Whether this vLLM version runs async scheduling unless told otherwise."""
    return parse_vllm_version(vllm_version) >= ASYNC_SCHEDULING_SINCE


# --- fitted coefficients -------------------------------------------------------------------
# Peak activation = C0 + hidden states held during the sampler run (mnbt x hidden x dtype)
#   + sampler rows x vocab x (logits in model dtype + SAMPLER_FP32_BYTES of fp32 logits,
#     sort values/int64 indices and softmax temporaries), or the forward pass if larger.
ACTIVATION_C0_BYTES = int(0.1026 * GIB)
SAMPLER_BYTES_PER_LOGIT = 12.15  # v0.17+; least squares on the three 0.19.0 activation figures
# Before 0.17: the same structure reproduces Qwen3-14B's reported 5.64 GiB (llm-d-planner)
# with 35.7 B per logit; the 0.17+ coefficient predicts its 2.23 GiB on 0.17-0.19 (a check).
SAMPLER_BYTES_PER_LOGIT_PRE_017 = 35.7
# Non-torch growth inside the budget: cuBLAS/attention workspaces (0.24-0.25 GiB at TP1) and,
# with TP > 1, NCCL/custom all-reduce buffers (2.06-2.13 GiB total at TP2/TP4 on H100).
NON_TORCH_BASE_BYTES = int(0.245 * GIB)
COMM_BUFFER_BYTES = int(1.7875 * GIB)
COMM_PER_PEER_BYTES = int(0.0325 * GIB)
# Outside the budget (taken before the memory snapshot): CUDA context, NCCL initialisation.
CUDA_CONTEXT_BYTES = int(0.51 * GIB)
NCCL_INIT_BYTES = int(1.0 * GIB)
# CUDA graphs: per decoder layer on the stage, a fixed part (graph objects for every capture
# size) plus the MLP intermediates of the largest captured batch: least squares on the five
# bf16 `cudagraph_gib` figures.
CUDAGRAPH_PER_LAYER_BYTES = int(0.01893 * GIB)
CUDAGRAPH_MLP_COEFF = 0.681
MAX_CUDAGRAPH_CAPTURE_TOKENS = 512
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class BatchDefaults:
    max_num_seqs: int
    max_num_batched_tokens: int
    rule: str


def batch_defaults(gpu_memory_bytes: int | None, gpu_name: str, version: tuple[int, int, int],
                   max_model_len: int) -> BatchDefaults:
    """vLLM's `EngineArgs` defaults for `vllm serve` (its `get_batch_defaults`), by device memory."""
    if version < V1_SINCE:
        mnbt = max(max_model_len, 2048) if max_model_len <= 32768 else 2048  # V0: chunked prefill above 32K
        return BatchDefaults(256, mnbt, "V0: 256 seqs, max(max_model_len, 2048) tokens (chunked prefill above 32K)")
    mem = gpu_memory_bytes or 0
    if mem >= 160 * GIB and version >= BIG_GPU_TIER_SINCE and "a100" not in gpu_name.lower():
        return BatchDefaults(1024, 16384, ">= 160 GiB device: 1024 seqs, 16384 batched tokens")
    if mem >= 70 * GIB and "a100" not in gpu_name.lower():
        return BatchDefaults(1024, 8192, ">= 70 GiB device (not A100): 1024 seqs, 8192 batched tokens")
    return BatchDefaults(256, 2048, "< 70 GiB device or A100: 256 seqs, 2048 batched tokens")


# --- weights -------------------------------------------------------------------------------
def _rotary_cache_bytes(spec: ModelSpec, dtype_bytes: int) -> int:
    """vLLM's `cos_sin_cache` buffer: [max_position, rotary_dim] in the model dtype (replicated)."""
    cfg = spec.config.get("text_config") or spec.config
    if spec.is_mla:
        rot = int(cfg.get("qk_rope_head_dim") or 64)
    else:
        rot = int(spec.head_dim * float(cfg.get("partial_rotary_factor") or 1.0))
    max_pos = spec.max_position_embeddings
    scaling = cfg.get("rope_scaling") or {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "")
    local = 0
    if spec.local_rope:
        # Gemma 3: the sliding layers' RoPE (rope_local_base_freq, default 10000, unscaled) is a second cache
        local = max_pos * rot * dtype_bytes
    if kind in ("yarn", "dynamic", "longrope") and scaling.get("original_max_position_embeddings"):
        max_pos = max(max_pos, int(scaling["original_max_position_embeddings"] * float(scaling.get("factor") or 1)))
    elif kind == "linear" and scaling.get("factor"):
        # vLLM LinearScalingRotaryEmbedding: cos/sin for max_position x factor positions
        max_pos = int(max_pos * float(scaling["factor"]))
    return max_pos * rot * dtype_bytes + local


def model_weights_bytes(spec: ModelSpec, dtype: str = "auto", quantization: str | None = None) -> int:
    """Whole-model weight bytes as loaded: real checkpoint bytes when known (rescaled for --dtype),
    else computed from the parameter split; `quantization` converts an unquantized checkpoint."""
    dt = spec.served_dtype(dtype)
    dbytes = MODEL_DTYPE_BYTES[dt]
    if quantization and quantization != "none" and spec.quant.method == "none":
        return make_quant(quantization).weights_bytes(spec.params, dbytes)
    if spec.checkpoint_weights_bytes:
        if spec.quant.method != "none":
            return spec.checkpoint_weights_bytes
        stored = MODEL_DTYPE_BYTES.get(spec.config_dtype or spec.dtype, dbytes)
        return spec.checkpoint_weights_bytes * dbytes // stored
    return spec.quant.weights_bytes(spec.params, dbytes)


def expert_weights_bytes(spec: ModelSpec, dtype: str = "auto", quantization: str | None = None) -> int:
    """The routed experts' bytes, whole model (0 for a dense model): converted at the scheme's bits
    per weight, else the model dtype."""

    n_experts, k, _, _ = spec.moe_shape
    if not (n_experts and k):
        return 0
    quant = (
        make_quant(quantization)
        if quantization and quantization != "none" and spec.quant.method == "none"
        else spec.quant
    )
    bits_x100 = quant.linear_bits_x100 if quant.method != "none" else MODEL_DTYPE_BYTES[spec.served_dtype(dtype)] * 800
    return spec.params.experts * bits_x100 // 800


def weights_bytes_per_gpu(spec: ModelSpec, *, dtype: str = "auto", quantization: str | None = None,
                          tp: int = 1, pp: int = 1, pp_rank: int = 0, expert_shards: int | None = None) -> int:
    """`Model loading took X GiB` on one rank: decoder layers of the stage split by TP, the
    (vocab-padded, vocab-parallel) embedding on the first stage, LM head on the last, and the
    rotary cos/sin cache. `expert_shards`: the GPUs a MoE layer's experts are spread over (with
    --data-parallel-size, DP x TP), else TP."""
    dbytes = MODEL_DTYPE_BYTES[spec.served_dtype(dtype)]
    total = model_weights_bytes(spec, dtype, quantization)
    p = spec.params
    padded_vocab = -(-spec.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    pad_rows = padded_vocab - spec.vocab_size
    emb = p.embedding * dbytes
    head = p.lm_head * dbytes
    layers_total = max(0, total - emb - head)
    stage_layers = len(pp_layer_range(spec.num_layers, pp, pp_rank))
    experts = (
        min(layers_total, expert_weights_bytes(spec, dtype, quantization))
        if expert_shards and expert_shards != tp
        else 0
    )
    out = (layers_total - experts) * stage_layers // spec.num_layers // tp
    if experts:
        out += experts * stage_layers // spec.num_layers // (expert_shards or tp)  # experts > 0: shards set
    if pp_rank == 0:
        out += (emb + pad_rows * spec.hidden_size * dbytes) // tp
    if pp_rank == pp - 1:
        lm = head if head else (emb if pp > 1 else 0)  # tied: the last stage keeps its own copy
        out += (lm + (pad_rows * spec.hidden_size * dbytes if head or pp > 1 else 0)) // tp
    return out + _rotary_cache_bytes(spec, dbytes)


# --- activation ----------------------------------------------------------------------------
def _mlp_width_per_rank(spec: ModelSpec, tp: int) -> int:
    """Elements per token of the MLP intermediates (gate+up output and activation: 3 x width)."""
    cfg = spec.config.get("text_config") or spec.config
    n_exp = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if n_exp:
        k = int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 1)
        inter = int(cfg.get("moe_intermediate_size") or spec.intermediate_size)
        shared = int(cfg.get("n_shared_experts") or 0)
        return (k + shared) * inter // tp
    return spec.intermediate_size // tp


def activation_bytes(spec: ModelSpec, *, dtype: str, max_num_batched_tokens: int, max_num_seqs: int,
                     tp: int = 1, last_stage: bool = True, version: tuple[int, int, int] = (0, 21, 0)) -> int:
    """Peak torch memory increase of `profile_run()`: max(forward of `max_num_batched_tokens`,
    hidden states kept + the dummy sampler over `min(max_num_seqs, mnbt)` rows of fp32 logits)."""
    db = MODEL_DTYPE_BYTES[spec.served_dtype(dtype)]
    tokens = max_num_batched_tokens
    width = _mlp_width_per_rank(spec, tp)
    sampler = 0
    if last_stage:
        per_logit = SAMPLER_BYTES_PER_LOGIT if version >= NEW_ACTIVATION_SINCE else SAMPLER_BYTES_PER_LOGIT_PRE_017
        rows = min(max_num_seqs, tokens)
        sampler = tokens * spec.hidden_size * db + int(rows * spec.vocab_size * (db + per_logit))
    if version < V1_SINCE:
        # V0 profiles one prefill of max_num_batched_tokens (= max_model_len up to 32K): residual, hidden and
        # attention output (3 x hidden) and the MLP intermediates (3 x width), with no fixed part beside it;
        # two RTX 3090 V0 logs (vLLM issue #10517: 2.07 and 2.99 GiB at 20K and 29K tokens) fit it within 1%
        return max(tokens * db * 3 * (spec.hidden_size + width), ACTIVATION_C0_BYTES + sampler)
    # residual + hidden + attention in/out (4 x hidden) and MLP intermediates (3 x width / TP)
    forward = tokens * db * (4 * spec.hidden_size + 3 * width)
    return ACTIVATION_C0_BYTES + max(forward, sampler)


# --- non-torch and CUDA graphs -------------------------------------------------------------
def non_torch_bytes(tp: int = 1, pp: int = 1) -> int:
    """Growth of non-torch memory after the start-up snapshot (charged to the budget)."""
    out = NON_TORCH_BASE_BYTES
    if tp > 1:
        out += COMM_BUFFER_BYTES + COMM_PER_PEER_BYTES * (tp - 1)
    if pp > 1:
        out += COMM_PER_PEER_BYTES  # p2p send/recv buffers (not calibrated: no PP start-up logs)
    return out


def init_outside_budget_bytes(tp: int = 1, pp: int = 1) -> int:
    """Resident before the snapshot (not charged, but it occupies the device)."""
    return CUDA_CONTEXT_BYTES + (NCCL_INIT_BYTES if tp * pp > 1 else 0)


def cudagraph_capture_tokens(max_num_seqs: int | None) -> int:
    """The largest batch (tokens) V1 captures a CUDA graph for: min(2 x max_num_seqs, 512); the
    default max_num_seqs (>= 256) gives 512."""
    return min(2 * max_num_seqs, MAX_CUDAGRAPH_CAPTURE_TOKENS) if max_num_seqs else MAX_CUDAGRAPH_CAPTURE_TOKENS


def cudagraph_bytes(spec: ModelSpec, *, dtype: str, tp: int = 1, pp: int = 1, pp_rank: int = 0,
                    max_num_seqs: int = 256, enforce_eager: bool = False) -> int:
    """Memory of the captured CUDA graphs on one rank (0 with --enforce-eager)."""
    if enforce_eager:
        return 0
    db = MODEL_DTYPE_BYTES[spec.served_dtype(dtype)]
    capture = cudagraph_capture_tokens(max_num_seqs)
    layers = len(pp_layer_range(spec.num_layers, pp, pp_rank))
    per_layer = CUDAGRAPH_PER_LAYER_BYTES + CUDAGRAPH_MLP_COEFF * capture * _mlp_width_per_rank(spec, tp) * db
    return int(ceil(layers * per_layer))
