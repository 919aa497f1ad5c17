"""`Sampler`: greedy, or temperature + top-p sampling with seeded generators."""
from __future__ import annotations

import torch

from kvplan.engine.sampling_params import SamplingParams


class Sampler:
    """Rows with `temperature == 0` take the argmax; the others sample, each from its request's
    own generator when the request has a seed, else from the engine's (seeded once)."""

    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, params: list[SamplingParams],
                 generators: list[torch.Generator | None]) -> list[int]:
        """logits [B, V] -> one token id per row."""
        logits = logits.float()
        tokens = logits.argmax(dim=-1).tolist()
        for row, p in enumerate(params):
            if p.greedy:
                continue
            probs = torch.softmax(logits[row] / p.temperature, dim=-1).cpu()
            if p.top_p < 1.0:
                sorted_probs, order = probs.sort(descending=True)
                keep = sorted_probs.cumsum(0) - sorted_probs < p.top_p  # smallest set whose mass reaches top_p
                probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_probs[keep])
            tokens[row] = int(torch.multinomial(probs, 1, generator=generators[row] or self.generator))
        return tokens
