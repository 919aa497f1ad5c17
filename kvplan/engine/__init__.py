"""The bundled paged-attention engine (nano-vllm's shape, transformers' models).

Modules: config.py (`EngineConfig`), llm_engine.py (`LLMEngine`), scheduler.py, block_manager.py,
kv_cache.py, sequence.py, model_runner.py, attention.py, triton_attention.py,
reference_kernel.py, sampler.py, sampling_params.py, outputs.py, threads.py, isolation.py.
May import plan, spec and below.

Names load on first use: `kvplan.engine.config` is light, while `LLMEngine` pulls in torch and
transformers, which a process that never builds an engine (estimate, report, an HTTP target)
must not pay for.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"EngineConfig": "config", "LLMEngine": "llm_engine", "EngineStats": "outputs",
          "RequestOutput": "outputs", "SamplingParams": "sampling_params"}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kvplan.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvplan.engine.{_HOMES[name]}"), name)
