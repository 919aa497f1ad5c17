"""`RouteRule`: which replica a request goes to, one rule for `predict --router` (router.py, on
simulated engines) and `kvplan stress` with replicas (stress/replica_router.py, on the bundled
engine's), so the prediction and the measured run route by the same code. The caller reads its
replicas' state; the rule decides:

    round-robin    in turn
    least-loaded   fewest requests routed there and not finished (llm-d's load-aware scorer,
                   reduced to queue depth); ties to the lowest index
    session        a conversation's turns stay on the replica its first turn went to (first turns:
                   least-loaded)
    prefix         KV-aware, as Dynamo's KV router scores a worker: the prompt blocks it would have to
                   compute (those past the longest prefix its GPU cache holds) plus the blocks its
                   requests hold or, sent and not yet admitted, will want; lowest wins (overlap
                   weight 1, Dynamo's default), ties to the lowest index. Overlap alone would send
                   every request sharing a system prompt to one replica.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from kvplan.errors import KvplanError

POLICIES = ("round-robin", "least-loaded", "session", "prefix")


def check_router(policy: str) -> str:
    """`policy` if kvplan models it; else one line naming the choices."""
    if policy not in POLICIES:
        raise KvplanError(f"--router {policy!r}: choose one of {', '.join(POLICIES)}")
    return policy


def lowest(values: Sequence[int]) -> int:
    """The index of the smallest value, the first of equals (the lowest index)."""
    return min(range(len(values)), key=values.__getitem__)


class RouteRule:
    def __init__(self, policy: str, num_replicas: int) -> None:
        self.policy = check_router(policy)
        self.num_replicas = num_replicas
        self.turn = 0
        self.home: dict[str, int] = {}  # session id -> the replica its first turn went to

    def pick(self, session_id: str | None, loads: Callable[[], Sequence[int]],
             kv_costs: Callable[[], Sequence[int]]) -> int:
        """The replica index for one request. `loads()`: each replica's requests routed and not
        finished; `kv_costs()`: each one's KV-aware cost in blocks (what differs between replicas
        is enough: a term every replica shares does not change the choice). Each is asked only when
        the policy needs it."""
        if self.policy == "round-robin":
            i = self.turn % self.num_replicas
            self.turn += 1
            return i
        if self.policy == "prefix":
            return lowest(kv_costs())
        if self.policy == "session" and session_id is not None and session_id in self.home:
            return self.home[session_id]
        i = lowest(loads())
        if session_id is not None:
            self.home.setdefault(session_id, i)
        return i
