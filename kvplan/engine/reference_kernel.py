"""A fixed piece of work timed during a run: how fast this machine is right now, whatever the
engine's code does.

The stress runner times it between engine steps (same process, same thread, same intra-op
threads), so a busy neighbour, a throttled clock or a slower machine stretch it as they stretch
the steps, while a slower engine does not touch it. Latency divided by its time is then a
machine-independent figure the gate can hold tight (`stress/figures.py`, group "normalized"),
which the cost model's `machine_speed_ratio` cannot be: that ratio is measured on the engine
itself, so an engine twice as slow per step reads as a machine twice as slow.

The work resembles a small decoder step: matmuls of a 256-wide MLP on 16 rows, an RMS norm and
the per-op dispatch that dominates tiny models on CPU; about 0.5 ms on one core of the 2-core CI box.
"""
from __future__ import annotations

import time

import torch

WIDTH = 256
HIDDEN = 688
ROWS = 16
LAYERS = 2


class ReferenceKernel:
    def __init__(self, device: str = "cpu") -> None:
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(0)
        self.w_up = (torch.randn(WIDTH, HIDDEN, generator=gen) / WIDTH ** 0.5).to(self.device)  # [256, 688]
        self.w_down = (torch.randn(HIDDEN, WIDTH, generator=gen) / HIDDEN ** 0.5).to(self.device)  # [688, 256]
        self.x = torch.randn(ROWS, WIDTH, generator=gen).to(self.device)  # [16, 256]
        for _ in range(3):  # first calls pay one-off costs (allocator, kernel choice)
            self.time_s()

    @torch.inference_mode()
    def _run(self) -> torch.Tensor:
        x = self.x
        for _ in range(LAYERS):
            x = torch.nn.functional.rms_norm(x + torch.nn.functional.silu(x @ self.w_up) @ self.w_down, (WIDTH,))
        return x

    def time_s(self) -> float:
        """Seconds one pass took (waiting for the GPU to finish on CUDA)."""
        start = time.perf_counter()
        self._run()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start
