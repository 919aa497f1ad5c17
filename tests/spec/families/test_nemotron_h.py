"""Nemotron-H: the block pattern (or transformers 5's layers_block_type words), one norm per block, a
relu^2 MLP without gate, Mamba2 intermediate = heads x head dim, the SSM state in float16 unless the
config says (vLLM's NemotronHForCausalLMConfig default)."""
from __future__ import annotations

from family_oracle import assert_within, spec

MIXER = {"mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1}


def test_matches_transformers() -> None:
    assert_within("nemotron_h", 1e-5)


def test_pattern_and_words_agree() -> None:
    a = spec("nemotron_h", hybrid_override_pattern="M*M-", **MIXER)
    b = spec("nemotron_h", layers_block_type=["mamba", "attention", "mamba", "mlp"], **MIXER)
    assert [x.label for x in a.layers] == [x.label for x in b.layers] == ["mamba2", "full", "mamba2", "mlp"]
    assert a.params == b.params
    assert a.params.mlp_dense == 2 * 64 * 96  # up and down, no gate
    assert a.params.norms == 5 * 64


def test_state_in_float16_by_default() -> None:
    st = spec("nemotron_h", hybrid_override_pattern="M*M-", **MIXER).layers[0].state
    assert st.ssm_dtype == "float16" and st.conv_channels == 8 * 16
    own = spec("nemotron_h", hybrid_override_pattern="M*M-", mamba_ssm_cache_dtype="float32", **MIXER)
    assert own.layers[0].state.ssm_dtype == "float32"
