"""Ranked, quantified fixes and the `vllm serve` recommendation.

Cheapest first: max-model-len, utilization headroom, max-num-seqs, then KV quantization, only
then more/bigger GPUs; each flag means what it means to `vllm serve`. A different model (a GQA
sibling) is a what-if of the variants table, never a ranked fix.
"""
from __future__ import annotations

import pytest

from kvplan.cli import main
from kvplan.plan.budget import plan_capacity
from kvplan.plan.engine_args import EngineArgs
from kvplan.plan.fixes import fixes_for, recommend, safe_max_utilization
from kvplan.spec.gpu import custom_gpu, load_gpu
from kvplan.spec.profiles import load_model


@pytest.fixture(scope="module")
def llama2_24gb():
    spec = load_model("llama-2-7b")
    args = EngineArgs(gpu=custom_gpu(24), max_model_len=32768)
    return spec, args, plan_capacity(spec, args)


def test_fixes_follow_the_cheapest_first_order(llama2_24gb):
    spec, args, plan = llama2_24gb
    fixes = fixes_for(spec, args, plan)
    titles = [f.title for f in fixes]
    order = ["shorter context", "more of the GPU for vLLM", "fewer concurrent sequences",
             "quantize the KV cache", "quantize the weights", "a 4-bit weight checkpoint",
             "combined: fp8 KV + fp8 weights", "tensor parallelism", "pipeline parallelism", "a bigger GPU"]
    assert titles == order
    assert [f.rank for f in fixes] == list(range(1, len(order) + 1))
    # on the GPU asked about: fewest GPUs first; another GPU last
    assert [f.gpus for f in fixes if not f.gpu_name] == sorted(f.gpus for f in fixes if not f.gpu_name)


def test_each_fix_is_quantified_by_replanning(llama2_24gb):
    spec, args, plan = llama2_24gb
    fixes = {f.title: f for f in fixes_for(spec, args, plan)}
    mml = fixes["shorter context"]
    assert mml.flags == f"--max-model-len {plan.estimated_max_model_len}" and mml.fits
    fp8 = fixes["quantize the KV cache"]
    assert (
        fp8.plan.num_gpu_blocks == 2 * plan.num_gpu_blocks
        or abs(fp8.plan.num_gpu_blocks - 2 * plan.num_gpu_blocks) <= 1
    )
    assert "tokens x2" in fp8.effect
    assert not any("GQA" in title for title in fixes)  # another model is no fix of this one
    bigger = fixes["a bigger GPU"]
    assert bigger.fits and bigger.plan.gpu_memory_bytes > plan.gpu_memory_bytes
    # raising utilization cannot reach 16 GiB of KV on a 24 GiB card
    assert not fixes["more of the GPU for vLLM"].fits


def test_utilization_fix_names_its_risk():
    """A case that fits by raising utilization (the headroom vLLM leaves unused)."""
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("h100"), max_model_len=131072, gpu_memory_utilization=0.5)
    plan = plan_capacity(spec, args)
    fixes = {f.title: f for f in fixes_for(spec, args, plan, target_concurrency=2)}
    util = fixes["more of the GPU for vLLM"]
    assert util.fits and util.flags.startswith("--gpu-memory-utilization 0.")
    assert util.plan.max_concurrency >= 2
    assert util.risk


def test_safe_utilization_leaves_room_for_context_and_graphs():
    spec = load_model("llama-3.1-8b-instruct")
    old = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), vllm_version="0.19.0"))
    new = plan_capacity(spec, EngineArgs(gpu=load_gpu("h100"), vllm_version="0.21.0"))
    assert safe_max_utilization(old) < safe_max_utilization(new) < 1.0


def test_fitting_plan_has_no_fixes():
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("h100"), max_model_len=8192)
    assert fixes_for(spec, args, plan_capacity(spec, args)) == ()


def test_recommend_on_the_chosen_gpu():
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("h100"), max_model_len=32768)
    rec = recommend(spec, args, 8)
    assert rec.met and rec.tensor_parallel_size == 1
    assert rec.plan.max_concurrency >= 8
    for flag in ("--gpu-memory-utilization", "--max-model-len 32768", "--max-num-seqs 8", "--block-size 16",
                 "--kv-cache-dtype auto", "--tensor-parallel-size 1"):
        assert flag in rec.command
    assert rec.command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")


def test_recommend_moves_to_tp_or_a_bigger_gpu():
    spec = load_model("llama-3.1-8b-instruct")
    rec = recommend(spec, EngineArgs(gpu=load_gpu("l4"), max_model_len=131072), 8)
    assert rec.met
    assert rec.gpus > 1 or rec.gpu.name != "l4"  # more GPUs (TP or PP) or another GPU
    assert rec.plan.max_concurrency >= 8


def test_recommend_with_kv_cache_memory_bytes_sizes_the_pool():
    spec = load_model("llama-3.1-8b-instruct")
    args = EngineArgs(gpu=load_gpu("h100"), max_model_len=8192, kv_cache_memory_bytes=10 * 2**30)
    rec = recommend(spec, args, 4)
    need = (4 * 512 + 1) * 2 * 2**20
    assert f"--kv-cache-memory-bytes {need}" in rec.command


def test_cli_prints_error_fixes_and_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", "llama-3.1-8b-instruct", "--gpu", "4090", "--max-model-len", "131072",
              "--target-concurrency", "2"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "To serve at least one request with the model's max seq len (131072)" in out
    assert "estimated maximum model length is" in out
    assert "shorter context" in out and "vllm serve" in out
