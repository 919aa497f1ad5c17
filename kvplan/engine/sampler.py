"""`Sampler`: greedy, or temperature + min-p + top-k + top-p sampling with seeded generators."""
from __future__ import annotations

import torch

from kvplan.engine.sampling_params import SamplingParams


class Sampler:
    """Greedy rows (temperature below vLLM's floor) take the argmax; the others sample, each from its
    request's own generator when the request has a seed, else from the engine's (seeded once). The
    filters run in vLLM's order: temperature, min-p, then top-k and top-p."""

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
            if p.min_p > 0.0:  # drop tokens less likely than min_p x the likeliest (renormalized below)
                probs = torch.where(probs >= probs.max() * p.min_p, probs, torch.zeros_like(probs))
            if p.top_k > 0 or p.top_p < 1.0:
                sorted_probs, order = probs.sort(descending=True)
                keep = torch.ones_like(sorted_probs, dtype=torch.bool)
                if p.top_k > 0:
                    keep[p.top_k:] = False
                if p.top_p < 1.0:  # smallest set whose mass reaches top_p (of what is left)
                    kept = sorted_probs * keep
                    keep &= kept.cumsum(0) - kept < p.top_p * kept.sum()
                    keep[0] = True  # the likeliest token always stays (a top_p that underflows keeps it alone)
                probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_probs[keep])
            tokens[row] = int(torch.multinomial(probs, 1, generator=generators[row] or self.generator))
        return tokens
