"""`ReplicaRouter`: which of the bundled engine's replicas a request goes to (a scenario's
`replicas` and `router`), one object for the measured run (`runner.py`) and its prediction
(`simulate.py`), so both route from the same state. The rule is `predict --router`'s
(kvplan.perf.route_rule: round-robin, least-loaded, session, prefix), read here from the engine's
own schedulers and block managers.
"""
from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING

from kvplan.kvpool.block_hash import chain_hash
from kvplan.perf.route_rule import POLICIES, RouteRule
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
        self.schedulers = list(schedulers)
        self.rule = RouteRule(policy, len(self.schedulers))
        self.load = [0] * len(self.schedulers)  # requests routed and not finished, per replica
        self.where: dict[str, int] = {}  # live request id -> its replica

    def pick(self, request_id: str, prompt_ids: Seq[int], session_id: str | None) -> int:
        """The replica for this request; it counts as routed there until `finished`."""
        i = self.rule.pick(session_id, lambda: self.load, lambda: self._kv_costs(prompt_ids))
        self.load[i] += 1
        self.where[request_id] = i
        return i

    def finished(self, request_id: str) -> None:
        i = self.where.pop(request_id, None)
        if i is not None:
            self.load[i] -= 1

    def _kv_costs(self, prompt_ids: Seq[int]) -> list[int]:
        # the prompt's own blocks cost every replica the same, so the cost is what differs:
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

        return [cost(s) for s in self.schedulers]
