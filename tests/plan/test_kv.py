"""The KV formula engine: published per-model KV figures, worked numbers, properties."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.errors import KvplanError
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.estimate import estimate
from kvplan.plan.kv import KvLayout, bytes_per_block, layer_bytes_per_token, pp_layer_range
from kvplan.spec.gpu import custom_gpu
from kvplan.spec.model import spec_from_config
from kvplan.spec.profiles import load_model

GIB, MIB = 2**30, 2**20


# Llama-2-7B's KV table: 32 layers, 32 heads x 128, fp16 = 512 KiB per token.
def test_llama_2_7b_kv_table():
    spec = load_model("llama-2-7b")
    lay = KvLayout.of(spec, "float16")
    assert lay.bytes_per_token() == 524_288  # 512 KB per token
    assert lay.request_bytes(1024) == 512 * MIB
    assert lay.batch_bytes(1024, 8) == 4 * GIB
    assert lay.batch_bytes(4096, 8) == 16 * GIB
    assert lay.batch_bytes(2048, 32) == 32 * GIB
    gqa = KvLayout.of(spec.with_kv_heads(16), "float16")
    assert gqa.batch_bytes(4096, 8) == 8 * GIB
    assert spec.params.total == 6_738_415_616
    assert spec.weights_bytes == 6_738_415_616 * 2
    assert round(spec.weights_bytes / GIB, 2) == 12.55


def test_24gb_card_does_not_fit_4k_x8():
    est = estimate(load_model("llama-2-7b"), EngineArgs(gpu=custom_gpu(24)), ctx_tokens=4096, concurrency=8)
    assert not est.fit.fits
    assert 1 <= est.fit.max_concurrency_at_ctx < 8
    # what the reported concurrency claims must itself fit, and one more must not
    lay = est.layout
    assert est.fit.max_concurrency_at_ctx * lay.request_bytes(4096) <= est.fit.kv_available_bytes_per_gpu
    assert (est.fit.max_concurrency_at_ctx + 1) * lay.request_bytes(4096) > est.fit.kv_available_bytes_per_gpu


@pytest.mark.parametrize("model,per_token", [
    ("llama-3-8b", 131_072),  # 2 x 32 layers x 8 KV heads x 128 x 2 B
    ("qwen2.5-7b", 57_344),
    ("qwen3-0.6b", 114_688),  # head_dim 128, not 1024/16
    ("deepseek-v2-lite", 31_104),  # 27 layers x 576 x 2 B (MLA latent)
    ("falcon-7b", 2 * 32 * 1 * 64 * 2),  # one cached KV head
])
def test_other_architectures(model, per_token):
    assert KvLayout.of(load_model(model)).bytes_per_token() == per_token


# Published per-sequence KV sizes: one sequence, 16-bit, sliding windows applied.
@pytest.mark.parametrize("model,ctx,gib", [
    ("llama-2-7b", 4096, 2.0), ("llama-3.1-8b", 131_072, 16.0), ("llama-3.1-70b", 131_072, 40.0),
    ("llama-3.1-405b", 131_072, 63.0), ("mistral-7b", 32_768, 0.5), ("gemma-2-9b", 8192, 1.97),
    ("gemma-3-27b", 131_072, 10.41), ("gpt-oss-120b", 131_072, 4.50), ("gpt-oss-20b", 131_072, 3.00),
    ("deepseek-v3", 131_072, 8.58), ("qwen3-32b", 40_960, 10.0),
])
def test_reference_worked_numbers(model, ctx, gib):
    assert KvLayout.of(load_model(model), "bfloat16").request_bytes(ctx, paged=False) / GIB == pytest.approx(
        gib, abs=0.005
    )


@pytest.mark.parametrize("model,ctx,gib", [("mistral-7b", 32_768, 4.0), ("gemma-2-9b", 8192, 2.63),
                                           ("gemma-3-27b", 131_072, 62.0), ("gpt-oss-120b", 131_072, 9.0)])
def test_window_blind_figures(model, ctx, gib):
    # the reference rounds half up (2.625 -> 2.63): compare to the half-unit of its last digit
    assert KvLayout.of(load_model(model), "bfloat16").request_bytes_all_full(ctx) / GIB == pytest.approx(gib, abs=0.005)


@pytest.mark.parametrize("model,ctx,mib", [("falcon-7b", 2048, 16), ("gpt2", 1024, 36)])
def test_small_models(model, ctx, mib):
    assert KvLayout.of(load_model(model), "float16").request_bytes(ctx) == mib * MIB


def test_gemma3_8k_request_far_below_all_full():
    lay = KvLayout.of(load_model("gemma-3-27b"))
    assert lay.request_bytes(8192) < 0.3 * lay.request_bytes_all_full(8192)


def test_kv_dtypes_and_scales():
    spec = load_model("llama-3-8b")
    bf16 = KvLayout.of(spec).bytes_per_token()
    assert KvLayout.of(spec, "fp8").bytes_per_token() * 2 == bf16
    assert KvLayout.of(spec, "fp8_e5m2").bytes_per_token() * 2 == bf16
    assert KvLayout.of(spec, "float32").bytes_per_token() == 2 * bf16
    # int8: 128 B + a 2-byte scale per (token, head) for K and V; int4: 64 B + 2 B
    assert KvLayout.of(spec, "int8").bytes_per_token() == 2 * 32 * 8 * (128 + 2)
    assert KvLayout.of(spec, "int4").bytes_per_token() == 2 * 32 * 8 * (64 + 2)
    with pytest.raises(KvplanError, match="fp6"):
        KvLayout.of(spec, "fp6")


def test_tensor_parallel_split_and_replication():
    spec = load_model("llama-3-8b")  # 8 KV heads
    assert KvLayout.of(spec, tp=2).bytes_per_token_per_gpu() * 2 == KvLayout.of(spec).bytes_per_token()
    assert KvLayout.of(spec, tp=8).bytes_per_token_per_gpu() == 2 * 32 * 1 * 128 * 2
    # tp 16 > 8 KV heads: each rank keeps one (replicated) head
    wide = KvLayout.of(spec.with_kv_heads(4), tp=8)
    assert wide.bytes_per_token_per_gpu() == 2 * 32 * 1 * 128 * 2
    assert wide.bytes_per_token_all_gpus() == 8 * wide.bytes_per_token_per_gpu()
    assert wide.bytes_per_token() == 4 * wide.bytes_per_token_per_gpu()  # whole model: one replica of each head
    mla = load_model("deepseek-v2-lite")  # MLA latent is not split by TP
    assert KvLayout.of(mla, tp=2).bytes_per_token_per_gpu() == KvLayout.of(mla).bytes_per_token_per_gpu()
    assert KvLayout.of(mla, tp=2).bytes_per_token() == KvLayout.of(mla).bytes_per_token()  # whole model: TP-independent
    with pytest.raises(KvplanError, match="does not divide"):
        KvLayout.of(spec, tp=3)


def test_pipeline_parallel_layers_per_stage():
    assert [len(pp_layer_range(32, 4, r)) for r in range(4)] == [8, 8, 8, 8]
    assert [len(pp_layer_range(30, 4, r)) for r in range(4)] == [7, 8, 8, 7]  # vLLM get_pp_indices
    spec = load_model("llama-3-8b")
    assert bytes_per_block(spec, pp=2) * 2 == bytes_per_block(spec)


def test_prefix_sharing_only_full_blocks():
    lay = KvLayout.of(load_model("llama-3-8b"))
    per_block = lay.bytes_per_block()
    assert lay.batch_bytes(1000, 4, prefix_tokens=100) == 4 * lay.request_bytes(1000) - 3 * 6 * per_block
    assert lay.batch_bytes(1000, 4, prefix_tokens=15) == 4 * lay.request_bytes(1000)


def test_bytes_per_block_is_page_times_layers():
    spec = load_model("llama-3-8b")
    assert bytes_per_block(spec, 16) == 2 * 16 * 8 * 128 * 2 * 32  # 2 MiB: a 16-token page in each of 32 layers
    assert bytes_per_block(spec, 16, layer_indices=[0, 1]) == 2 * 2 * 16 * 8 * 128 * 2


def _model(layers: int, kv_heads: int = 2, window: int | None = None, pattern: int | None = None):
    cfg = {
        "model_type": "mistral" if window else "llama",
        "num_hidden_layers": layers,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": kv_heads,
        "vocab_size": 100,
        "max_position_embeddings": 1 << 20,
    }
    if window:
        cfg["sliding_window"] = window
    return spec_from_config(cfg, "prop")


contexts = st.integers(1, 200_000)
blocks = st.sampled_from([1, 8, 16, 32, 128])
windows = st.one_of(st.none(), st.integers(64, 8192))


@settings(max_examples=200, deadline=None)
@given(ctx=contexts, extra=st.integers(1, 5000), n=st.integers(1, 64), bs=blocks, w=windows, layers=st.integers(1, 80))
def test_monotone_in_ctx_concurrency_and_layers(ctx, extra, n, bs, w, layers):
    lay = KvLayout.of(_model(layers, window=w), block_size=bs)
    assert lay.batch_bytes(ctx + extra, n) >= lay.batch_bytes(ctx, n)
    assert lay.batch_bytes(ctx, n + 1) > lay.batch_bytes(ctx, n)
    assert KvLayout.of(_model(layers + 1, window=w), block_size=bs).batch_bytes(ctx, n) > lay.batch_bytes(ctx, n)


@settings(max_examples=200, deadline=None)
@given(
    ctx=contexts,
    slack=st.integers(0, 100_000),
    bs=blocks,
    w=windows,
    dtype=st.sampled_from(["auto", "fp8", "int8", "int4"]),
)
def test_paged_never_exceeds_contiguous(ctx, slack, bs, w, dtype):
    lay = KvLayout.of(_model(4, window=w), dtype, block_size=bs)
    assert lay.request_bytes(ctx) <= lay.contiguous_request_bytes(ctx + slack)


@settings(max_examples=200, deadline=None)
@given(ctx=contexts, bs=blocks, w=windows)
def test_block_rounding_wastes_less_than_a_block(ctx, bs, w):
    spec = _model(4, window=w)
    lay = KvLayout.of(spec, block_size=bs)
    per_token = sum(layer_bytes_per_token(ln, lay.kv_dtype) for ln in spec.layers)
    waste = lay.request_bytes(ctx) - lay.request_bytes(ctx, paged=False)
    assert 0 <= waste < bs * per_token  # fewer than block_size tokens per layer


# --- limits and edges, each value derived by hand ------------------------------------------------
def test_largest_fitting_finds_the_last_n_that_fits() -> None:
    from kvplan.plan.kv import largest_fitting

    for bound in range(0, 45):
        found = largest_fitting(0, 40, lambda n, b=bound: n <= b)
        assert found == min(bound, 40) and type(found) is int, bound
    assert largest_fitting(0, 100, lambda n: 7 * n <= 500) == 71
    assert largest_fitting(5, 5, lambda n: 1 / 0) == 5  # fits(lo) is never asked


@pytest.mark.parametrize(("budget", "block", "blocks"), [
    (1000, 300, 3), (1000, 1, 1000), (0, 16, 0), (-100, 10, 0), (1000, 0, 0), (1000, -5, 0)])
def test_blocks_in_budget_is_whole_blocks_and_never_negative(budget: int, block: int, blocks: int) -> None:
    from kvplan.plan.kv import blocks_in_budget

    assert blocks_in_budget(budget, block) == blocks


def test_bytes_per_block_per_stage_and_its_bad_block_size() -> None:
    spec = load_model("llama-2-7b")  # fp16 by default ("auto"): 2 x 32 heads x 128 x 2 B = 16 KiB a token a layer
    assert bytes_per_block(spec, 16) == 32 * 16 * 16384
    assert bytes_per_block(spec, 1, "float16") == 32 * 16384
    # PP 3 splits 32 layers 11 / 11 / 10 (vLLM's get_pp_indices gives the remainder to the first stages)
    assert bytes_per_block(spec, 16, "float16", 1, 3) == 11 * 16 * 16384  # the busiest stage
    assert bytes_per_block(spec, 16, "float16", 1, 3, 2) == 10 * 16 * 16384  # the last stage
    lay = KvLayout.of(load_model("llama-3-8b"), "float16", tp=2, pp=2)  # 8 KV heads: 4 a rank; 16 layers a stage
    assert lay.bytes_per_block() == 16 * 16 * (2 * 4 * 128 * 2)
    with pytest.raises(KvplanError, match="block size must be positive, got 0"):
        bytes_per_block(spec, 0)
    with pytest.raises(KvplanError, match="--block-size must be positive, got 0"):
        KvLayout.of(spec, block_size=0)


@pytest.mark.parametrize(("model", "tp", "pp", "says"), [
    ("llama-2-7b", 0, 1, "tensor/pipeline parallel sizes must be positive, got tp=0 pp=1"),
    ("llama-2-7b", 1, 0, "tensor/pipeline parallel sizes must be positive, got tp=1 pp=0"),
    ("llama-2-7b", 1, 33, "--pp 33 is larger than llama-2-7b's 32 layers"),
    ("llama-2-7b", 3, 1, "--tp 3 does not divide llama-2-7b's 32 attention heads; valid: 1, 2, 4, 8, 16, 32"),
    ("llama-3.1-405b", 3, 1, "valid: 1, 2, 4, 8, 16, 32, 64$"),  # 128 heads: TP sizes up to 64 offered
    ("falcon-mamba-7b", 3, 1, "8192 heads and 8192 conv channels must divide by --tp 3"),
])
def test_parallel_layouts_vllm_refuses_are_named(model: str, tp: int, pp: int, says: str) -> None:
    with pytest.raises(KvplanError, match=says.replace("(", r"\(").replace(")", r"\)")):
        KvLayout.of(load_model(model), tp=tp, pp=pp)


def test_tp_must_divide_or_multiply_the_kv_heads_except_for_mla() -> None:
    cfg = {"model_type": "llama", "hidden_size": 6144, "num_attention_heads": 48, "num_key_value_heads": 12,
           "num_hidden_layers": 4, "intermediate_size": 16384, "vocab_size": 32000, "max_position_embeddings": 4096}
    spec = spec_from_config(cfg, "gqa-12")
    with pytest.raises(KvplanError, match="--tp 8 must divide or be a multiple of gqa-12's 12 KV heads"):
        KvLayout.of(spec, tp=8)  # 48 heads split by 8, but 12 KV heads neither split by 8 nor repeat evenly
    assert KvLayout.of(spec, tp=4).bytes_per_token_per_gpu() == 4 * 2 * 3 * 128 * 2  # 3 KV heads a rank
    assert KvLayout.of(load_model("deepseek-v2-lite"), tp=16).bytes_per_token_per_gpu() == 27 * 576 * 2  # latent


def test_a_shared_prefix_is_counted_once_in_the_batch_and_in_max_concurrency() -> None:
    """Llama-2-7B fp16, 4 requests of 1,024 tokens sharing 512: 4 x 512 MiB - 3 x 32 shared blocks
    (256 MiB each request) = 1,280 MiB; the budget of exactly that fits 4, one byte less 3."""
    lay = KvLayout.of(load_model("llama-2-7b"), "float16")
    assert lay.batch_bytes_per_gpu(1024, 4) == 2048 * MIB
    assert lay.batch_bytes_per_gpu(1024, 4, prefix_tokens=512) == 1280 * MIB
    assert lay.batch_bytes_per_gpu(1024, 1, prefix_tokens=512) == 512 * MIB  # nothing to share with
    assert lay.max_concurrency(1024, 2048 * MIB) == 4
    assert lay.max_concurrency(1024, 2048 * MIB - 1) == 3
    assert lay.max_concurrency(1024, 1280 * MIB, prefix_tokens=512) == 4
    assert lay.max_concurrency(1024, 1280 * MIB - 1, prefix_tokens=512) == 3
    assert lay.max_concurrency(1024, 511 * MIB) == 0


def test_max_tokens_is_the_longest_context_n_requests_fit() -> None:
    lay = KvLayout.of(load_model("llama-2-7b"), "float16")  # 8 MiB a 16-token block
    assert lay.max_tokens(4, 2048 * MIB, 100_000) == 1024  # 64 blocks each; 1,025 tokens need a 65th
    assert lay.max_tokens(4, 2048 * MIB, 1000) == 1000  # the limit
    assert lay.max_tokens(4, 32 * MIB - 1, 100_000) == 0  # not one block each


def test_a_mamba_models_state_is_per_request_and_split_by_tp() -> None:
    """falcon-mamba-7b (bf16, 64 layers, intermediate 8,192, d_state 16, d_conv 4): vLLM's MambaSpec
    holds a conv state of 8,192 x 3 and an SSM state of 8,192 x 16 a layer, 2 B each: 311,296 B,
    x 64 = 19,922,944 B a request; TP 2 halves the channels. No token grows it."""
    spec = load_model("falcon-mamba-7b")
    lay = KvLayout.of(spec)
    assert lay.bytes_per_token() == 0 and lay.state_bytes_per_request() == 64 * 311_296 == 19_922_944
    assert lay.request_bytes_all_full(1000) == 19_922_944
    two = KvLayout.of(spec, tp=2)
    assert two.request_bytes_per_gpu(1000, paged=False) == two.request_bytes_per_gpu(1000) == 19_922_944 // 2
    assert KvLayout.of(spec, state_copies=2).request_bytes(1000) == 2 * 19_922_944


def test_deepseek_v4_blocks_hold_whole_compressed_entries() -> None:
    """DeepSeek-V4-Pro compresses some layers' caches 128:1 (`compress_ratios` in its config.json), so
    a block holds a multiple of 128 tokens: 16 -> 128, 128 stays, 129 -> 256."""
    import json
    from pathlib import Path

    from kvplan.plan.kv import unified_block_size

    path = Path(__file__).parents[1] / "data/aiconfigurator/model_configs/deepseek-ai--DeepSeek-V4-Pro_config.json"
    spec = spec_from_config(json.loads(path.read_text()), "deepseek-v4-pro")
    kv = spec.kv_dtype("auto")
    assert [unified_block_size(spec, b, kv) for b in (16, 128, 129)] == [128, 128, 256]
