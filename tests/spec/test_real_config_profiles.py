"""Issue 12 profiles from real config.json copies, each checked against a hand count from the config
and vLLM's cache rules.

Found verbatim so far: Llama-3.2-11B-Vision (TensorRT-LLM's test copy of the published config.json).
Not found verbatim in the searchable public material (so no profile): Granite-4.0-H, Falcon-H1, Gemma-3n,
DBRX, GLM-4.5 / GLM-4.6 (see the commit message).

vLLM files the rules come from:
- vllm/v1/kv_cache_interface.py: FullAttentionSpec (2 x kv heads x head_size x dtype bytes per token per
  layer) and CrossAttentionSpec (a request's encoder tokens, paged like any attention layer)
- vllm/model_executor/models/mllama.py: `cross_attention_layers` hold MllamaCrossAttentionDecoderLayer
  (cross-attention over the vision encoder's output), the other text layers self-attention
"""
from __future__ import annotations

import json

import pytest

from kvplan.cli import main
from kvplan.plan.kv import KvLayout
from kvplan.spec.profiles import load_model


def test_llama_3_2_11b_vision_cross_attention_layers():
    """40 text layers; cross_attention_layers [3, 8, ..., 38] are 8 cross-attention layers, 32 are
    self-attention. Self-attention KV/token: 2 (K, V) x 32 layers x 8 KV heads x 128 (4096 / 32) x 2 B.
    Cross layers cache one image's encoder tokens per request: max_num_tiles 4 x ((448 / 14)^2 + 1) = 4,100,
    i.e. cdiv(4100, 16) = 257 blocks of 16 tokens per cross layer, whatever the text length."""
    spec = load_model("llama-3.2-11b-vision")
    lay = KvLayout.of(spec)
    assert spec.attention_kinds == {"full": 32, "cross": 8}
    assert [i for i, layer in enumerate(spec.layers) if layer.kind == "cross"] == [3, 8, 13, 18, 23, 28, 33, 38]
    assert lay.bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert lay.state_bytes_per_request() == 0
    per_layer_token = 2 * 8 * 128 * 2  # one layer's K and V for one token, bf16
    assert 4 * ((448 // 14) ** 2 + 1) == 4_100 and -(-4_100 // 16) == 257
    expected = 32 * (4096 // 16) * 16 * per_layer_token + 8 * 257 * 16 * per_layer_token
    assert lay.request_bytes(4096) == expected == 671_612_928
    # the cross layers' share does not grow with the text: 16 more tokens cost only the 32 self-attention layers
    assert lay.request_bytes(4096 + 16) - lay.request_bytes(4096) == 32 * 16 * per_layer_token
    assert 10.0e9 < spec.params.total < 11.0e9  # published as Llama 3.2 "11B" Vision (text + vision tower)


def test_llama_3_2_11b_vision_estimate_on_h100(capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "llama-3.2-11b-vision", "--ctx", "4096", "--concurrency", "8",
              "--gpu", "h100", "--json"])
    out, err = capsys.readouterr()
    assert info.value.code == 0, err[-2000:]
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == 131_072
    assert data["state_bytes_per_request"] == 0
    assert data["vllm_block_size"] == 16
