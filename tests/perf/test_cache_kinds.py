"""A prediction names every cache kind its step does not time (a hybrid's recurrent state, a sparse
index, DeepSeek-V4's compressed entries) and stays silent for a plain decoder."""
from __future__ import annotations

from kvplan.perf.cache_kinds import untimed_kinds
from kvplan.perf.predict import predict
from kvplan.plan.engine_args import EngineArgs
from kvplan.spec.gpu import load_gpu
from kvplan.spec.profiles import load_model
from kvplan.workload.datasets.random_dataset import RandomDataset


def test_plain_decoder_is_fully_timed() -> None:
    assert untimed_kinds(load_model("llama-3.1-8b-instruct")) is None


def test_untimed_kinds_are_named() -> None:
    assert "RecurrentState" in (untimed_kinds(load_model("qwen3-next-80b-a3b-thinking")) or "")
    assert "IndexedSparse" in (untimed_kinds(load_model("deepseek-v3.2")) or "")


def test_the_prediction_says_so() -> None:
    spec = load_model("qwen3.5-35b-a3b")
    reqs = RandomDataset(random_input_len=200, random_output_len=20, num_prompts=5, request_rate=1.0).requests()
    args = EngineArgs.from_flags(gpu=load_gpu("h200"), max_model_len=4096)
    sources = predict(spec, args, reqs).figures["step_cost_sources"]
    assert "RecurrentState" in sources["cache_kinds"]
