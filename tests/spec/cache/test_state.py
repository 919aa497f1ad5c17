"""Recurrent states against vLLM's MambaStateShapeCalculator (vllm/model_executor/layers/mamba/mamba_utils.py),
worked by hand: Mamba2 conv (k - 1, I + 2 G N), ssm (H, P, N); Gated-DeltaNet conv (k - 1, 2 nk dk + nv dv),
ssm (nv, dv, dk); both split by TP."""
from __future__ import annotations

from kvplan.spec.cache import RecurrentState


def test_mamba2_state() -> None:
    # I 8192, G 8, N 128, H 128, P 64, k 4 (Nemotron-H-8B-like)
    st = RecurrentState("mamba2", 8192, 4, 128, 64, 128, groups=8)
    conv, ssm = 3 * (8192 + 2 * 8 * 128), 128 * 64 * 128
    assert st.bytes_per_request("bfloat16") == (conv + ssm) * 2
    assert st.bytes_per_request("bfloat16", tp=2) == (conv // 2 + ssm // 2) * 2
    float16_ssm = RecurrentState("mamba2", 8192, 4, 128, 64, 128, groups=8, ssm_dtype="float32")
    assert float16_ssm.bytes_per_request("bfloat16") == conv * 2 + ssm * 4


def test_groups_are_replicated_to_cover_the_ranks() -> None:
    # vLLM extra_groups_for_head_shards: 1 group over tp 4 -> 4 groups' worth of B and C
    st = RecurrentState("mamba2", 4096, 4, 64, 64, 128, groups=1)
    assert st.conv_elements_total(4) == 4096 + 2 * 4 * 128


def test_gated_delta_net_state() -> None:
    # Qwen3-Next: nk 16, dk 128, nv 32, dv 128, k 4
    st = RecurrentState("gdn", 2 * 16 * 128 + 32 * 128, 4, 32, 128, 128)
    assert st.bytes_per_request("bfloat16") == (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2


def test_a_state_holds_no_tokens() -> None:
    st = RecurrentState("short_conv", 2048, 3, 2048, 1, 0)
    assert st.kept_tokens(10_000) == 0 and st.pool_blocks(4096, 8192, 16) == 1
    assert st.bytes_per_request("bfloat16") == 2 * 2048 * 2  # LFM2: conv only, (L_cache - 1) x conv_dim
