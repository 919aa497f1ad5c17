"""`ReplicaRouter`: which of the bundled engine's replicas a request goes to (a scenario's
`replicas` and `router`), one object for the measured run (`runner.py`) and its prediction
(`simulate.py`), so both route from the same state by the same rule. The rules are `predict
--router`'s (kvplan.perf.router), on the engine's own scheduler and block manager:

    round-robin    in turn
    least-loaded   fewest requests routed there and not finished; ties to the lowest index
    session        a conversation's turns stay where its first turn went (first turns: least-loaded)
    prefix         Dynamo's KV-router cost: the prompt blocks the replica would compute (those past
                   the longest prefix its GPU cache holds) + the blocks its requests hold + those
                   its waiting requests will want; lowest wins, ties to the lowest index
"""
from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING

from kvplan.kvpool.block_hash import chain_hash
from kvplan.perf.router import POLICIES, check_router
from kvplan.validation import FieldIssue, short_repr

if TYPE_CHECKING:
    from kvplan.engine.scheduler import Scheduler

MAX_REPLICAS = 16  # each replica is a whole engine (weights and pool) in this process


def check_replicas(replicas: int, router: str | None) -> None:
    """A replica count and router the run can take, or a `FieldIssue` naming the field and the choices."""
    if router is not None and router not in POLICIES:
        raise FieldIssue(("router",), f"{short_repr(router)}: choose one of {', '.join(POLICIES)}")
    if replicas == 1 and router is not None:
        raise FieldIssue(("router",), f"{router!r} on one replica routes nothing: set replicas to 2 or more, "
                                      "or drop the router")
    if replicas > 1 and router is None:
        raise FieldIssue(("router",), f"replicas: {replicas} needs a router: one of {', '.join(POLICIES)}")


class ReplicaRouter:
    def __init__(self, policy: str, schedulers: Seq[Scheduler]) -> None:
        self.policy = check_router(policy)
        self.schedulers = list(schedulers)
        self.turn = 0
        self.load = [0] * len(self.schedulers)  # requests routed and not finished, per replica
        self.where: dict[str, int] = {}  # live request id -> its replica
        self.home: dict[str, int] = {}  # session id -> the replica its first turn went to

    def pick(self, request_id: str, prompt_ids: Seq[int], session_id: str | None) -> int:
        """The replica for this request; it counts as routed there until `finished`."""
        if self.policy == "round-robin":
            i = self.turn % len(self.schedulers)
            self.turn += 1
        elif self.policy == "prefix":
            i = self._cheapest(prompt_ids)
        elif self.policy == "session" and session_id is not None and session_id in self.home:
            i = self.home[session_id]
        else:
            i = self.load.index(min(self.load))  # the first of equals: the lowest index
            if session_id is not None:
                self.home.setdefault(session_id, i)
        self.load[i] += 1
        self.where[request_id] = i
        return i

    def finished(self, request_id: str) -> None:
        i = self.where.pop(request_id, None)
        if i is not None:
            self.load[i] -= 1

    def _cheapest(self, prompt_ids: Seq[int]) -> int:
        # the prompt's own blocks cost every replica the same, so the choice is by what differs:
        # blocks held + blocks waiting requests want - blocks of this prompt already cached (none
        # without prefix caching: nothing is ever registered)
        bs = self.schedulers[0].block_manager.block_size
        usable = (len(prompt_ids) - 1) // bs  # a full hit still computes the last token
        hashes: list[int] = []
        for b in range(usable):
            hashes.append(chain_hash(hashes[-1] if hashes else None, prompt_ids[b * bs:(b + 1) * bs]))

        def cost(s: Scheduler) -> int:
            bm = s.block_manager
            queued = sum(-(-len(q) // bs) for q in s.waiting)
            return bm.num_used_blocks + queued - len(bm.pool.lookup(hashes))

        costs = [cost(s) for s in self.schedulers]
        return costs.index(min(costs))
