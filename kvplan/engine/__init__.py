"""The bundled paged-attention engine (nano-vllm's shape, transformers' models)."""
from kvplan.engine.config import EngineConfig
from kvplan.engine.llm_engine import LLMEngine
from kvplan.engine.outputs import EngineStats, RequestOutput
from kvplan.engine.sampling_params import SamplingParams

__all__ = ["EngineConfig", "EngineStats", "LLMEngine", "RequestOutput", "SamplingParams"]
