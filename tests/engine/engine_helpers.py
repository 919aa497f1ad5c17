"""Helpers shared by the engine tests: tiny random-weight models (one per family, built once)
and transformers' own greedy outputs for a fixed set of mixed-length prompts."""
from __future__ import annotations

import functools

import torch
from transformers import GenerationConfig

from kvplan.engine.model_runner import random_model
from kvplan.spec.profiles import model_profile

FAMILIES = ("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3")
PROMPT_LENS = (8, 300, 23, 64, 129, 17, 250, 45, 96, 12, 200, 33, 160, 70, 9, 111)  # 16 prompts, 8..300 tokens
MAX_TOKENS = (24, 8, 16, 30, 12, 20, 6, 26, 10, 28, 14, 18, 22, 9, 32, 11)  # requests leave at different steps


def build_model(name: str, seed: int = 0) -> torch.nn.Module:
    """The HF model of a bundled profile, random weights under `torch.manual_seed(seed)`, float32."""
    return random_model(model_profile(name)["config"], torch.float32, seed)


@functools.cache
def tiny_model(name: str) -> torch.nn.Module:
    return build_model(name)


def make_prompts(lengths=PROMPT_LENS, seed: int = 1, vocab: int = 2048) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(
    model: torch.nn.Module, prompts: list[list[int]], max_tokens: list[int] | tuple[int, ...]
) -> list[list[int]]:
    """transformers' own generate, one prompt at a time (no padding), EOS ignored."""
    out = []
    with torch.inference_mode():
        for prompt, n in zip(prompts, max_tokens):
            cfg = GenerationConfig(max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
            ids = model.generate(torch.tensor([prompt]), generation_config=cfg)
            out.append(ids[0, len(prompt):].tolist())
    return out


@functools.cache
def reference(name: str) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, transformers' greedy continuations) for family `name`."""
    prompts = make_prompts()
    return prompts, hf_greedy(tiny_model(name), prompts, MAX_TOKENS)
