"""Pure Mamba2: every layer a Mamba2 mixer with one norm, no attention, the head not tied by default."""
from __future__ import annotations

from family_oracle import spec


def test_every_layer_is_a_mamba2_mixer() -> None:
    s = spec("mamba2", num_attention_heads=None, num_key_value_heads=None, num_heads=8, head_dim=16,
             state_size=16, n_groups=1, expand=2)
    assert {layer.label for layer in s.layers} == {"mamba2"}
    assert s.params.norms == 5 * 64 and s.params.lm_head == 320 * 64
    # conv (k - 1 = 3) x (I + 2 G N = 128 + 32) + ssm H P N = 8 x 16 x 16, bf16
    assert s.layers[0].state.bytes_per_request("bfloat16") == (3 * 160 + 8 * 16 * 16) * 2
