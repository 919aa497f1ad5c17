"""The memory planner: KV bytes and vLLM's start-up budget, exactly as vLLM sizes its pool.

Modules: kv.py (bytes per token, block, request, batch), groups.py (vLLM's KV-cache groups),
engine_args.py (`EngineArgs`, the `vllm serve` flags and their one set of checks), budget.py
(the capacity plan), overheads.py (weights, activation, non-torch, CUDA graphs),
encoder_profile.py (the multimodal profile run), estimate.py (`kvplan estimate`), fit.py (whether a
batch fits one GPU), catalog_fit.py (which catalog GPUs it fits, without --gpu), explain.py
(sentences about a plan), replan.py, fixes.py and search.py (what to change when it does not fit),
sweep.py (`kvplan sweep`). May import spec and below.
"""
