"""A request as the scheduler simulation (`schedule`) tracks it: token counts, blocks and times."""
from __future__ import annotations

from typing import Any

from kvplan.workload.request import Request


class RequestState:
    """One request's progress through the simulated engine (integers, for speed)."""

    __slots__ = (
        "arrival_s",
        "ready_s",
        "prompt",
        "out",
        "known",
        "computed",
        "blocks",
        "generated",
        "send_s",
        "send_step",
        "start_step",
        "first_step",
        "last_step",
        "first_s",
        "last_s",
        "freed",
        "stream",
        "table",
        "uid",
        "next_turn",
        "think_s",
        "turn_ids",
        "hit_tokens",
        "preempted",
        "registered",
        "stored",
        "loading",
        "cpu_hit_tokens",
    )

    def __init__(self, req: Request) -> None:
        # a closed loop's requests are all due at 0: the client's concurrency sends them
        self.arrival_s: float = req.arrival_s or 0.0
        self.prompt, self.out = req.prompt_tokens, req.output_tokens
        self.ready_s = 0.0  # when the API server hands it to the engine
        self.known = req.prompt_tokens  # tokens whose KV must exist before the next sample
        self.computed = req.cached_tokens  # prefix-cache hits: computed without being scheduled
        self.blocks = self.generated = 0
        self.send_s, self.send_step = 0.0, 0
        self.start_step = self.first_step = self.last_step = -1  # start: its first scheduled step
        self.first_s = self.last_s = 0.0
        # preempted: its freed blocks' place in the free queue ([owner, blocks left], owner None once
        # reclaimed) and how many of them were full (hashed, so a hit when it comes back); else None
        self.freed: tuple[list, int] | None = None
        # with a hashed pool (`reuse_blocks`): the token stream its blocks are hashed from (a
        # conversation's turns share one), its block ids, a unique id for its stand-in reply tokens
        self.stream: Any = None
        self.table: list[int] = []
        self.uid = req.index
        self.next_turn: RequestState | None = None  # a conversation's next turn, released when this one ends
        self.think_s, self.turn_ids = req.think_s, req.turn_ids
        self.hit_tokens = -1  # prompt tokens the prefix cache served at its first admission (-1: not yet)
        self.preempted = False
        self.registered = 0  # its leading blocks registered in the cache (vLLM's num_cached_block)
        # a CPU tier (`cpu_offload`): its leading blocks offered to the tier, the copy it waits on
        # ((done s, the hashes being read) or None) and the tokens the tier served at admission
        self.stored = 0
        self.loading: tuple[float, list[int]] | None = None
        self.cpu_hit_tokens = 0
