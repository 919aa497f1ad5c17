"""Unknown names: 'did you mean' puts the same family and size first; the bf16 70B instruct profiles exist."""
from __future__ import annotations

import pytest

from kvplan.errors import KvplanError, close_names
from kvplan.plan.kv import bytes_per_block
from kvplan.spec.profiles import load_model, model_names


def test_same_family_and_size_first() -> None:
    names = model_names()
    assert close_names("llama-3-70b-instruct", names)[:2] == ["llama-3.1-70b-instruct", "llama-3.3-70b-instruct"]
    assert close_names("qwen-72b", names)[0].startswith("qwen2.5-72b")
    assert all("8b" not in n for n in close_names("llama-3-70b-instruct", names)[:3])  # not the 8B models first
    with pytest.raises(KvplanError, match="did you mean: llama-3.1-70b-instruct"):
        load_model("llama-3-70b-instruct")


@pytest.mark.parametrize("name", ["llama-3.1-70b-instruct", "llama-3.3-70b-instruct"])
def test_bf16_70b_instruct_profiles(name: str) -> None:
    spec = load_model(name)
    # 2 (K and V) x 80 layers x 8 KV heads x 128 x 2 bytes: Llama-3-70B's GQA layout
    assert bytes_per_block(spec, 16, "bfloat16") == 16 * 2 * 80 * 8 * 128 * 2
    assert spec.max_position_embeddings == 131072 and spec.hf_id.startswith("meta-llama/")
