"""`StepShape`: one definition of a batch's numbers for every simulation. `kvplan stress` builds
shapes from the bundled engine's batches (`from_counts`), `predict`'s scheduler builds them inline
(`Engine._shape`); both must count attention the causal way flash attention computes it, or a GPU
stress run and `predict` time the same batch differently."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvplan.perf.request_state import RequestState
from kvplan.perf.schedule import Engine
from kvplan.perf.step_cost import StepShape, causal_pairs
from kvplan.workload.request import Request


def test_causal_pairs_by_hand() -> None:
    # a fresh 7-token prompt: token i sees i keys, 1 + ... + 7 = 28
    assert causal_pairs(0, 7) == 28
    # 5 new after 10 cached: 11 + 12 + 13 + 14 + 15 = 65
    assert causal_pairs(10, 5) == 65
    # a decode after 99 cached tokens attends to 100
    assert causal_pairs(99, 1) == 100
    # even n: n * (c + (n + 1) // 2), n/2 short of the exact n*c + n(n+1)/2 (4 new after 0: 8, not 10)
    assert causal_pairs(0, 4) == 8


def test_a_mixed_batch_by_hand() -> None:
    """A 511-token fresh prefill beside decodes at 500 and 800 cached tokens, two of them sampling."""
    s = StepShape.from_counts([0, 500, 800], [511, 1, 1], sampled=2)
    assert (s.num_tokens, s.num_seqs, s.context_tokens) == (513, 3, 511 + 501 + 801)
    assert s.attention_pairs == 511 * 512 // 2 + 501 + 801
    assert (s.num_prefill_tokens, s.num_prefill_seqs, s.prefill_pairs) == (511, 1, 511 * 512 // 2)
    assert s.sampled == 2
    assert StepShape.from_counts([3], [1]).sampled == 1  # unsaid: every sequence samples


def _state(computed: int, known: int) -> RequestState:
    r = RequestState(Request(0.0, known, 1))
    r.computed = computed
    return r


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 2048), st.booleans()), min_size=1, max_size=8))
def test_predict_s_scheduler_and_the_stress_simulation_shape_a_batch_alike(batch) -> None:
    """Each (cached, new, samples) request: the scheduler's inline shape equals `from_counts`."""
    scheduled = [(_state(c, c + n if samples else c + n + 1), n) for c, n, samples in batch]
    inline = Engine._shape(scheduled)
    sampled = sum(samples for _, _, samples in batch)
    assert inline == StepShape.from_counts([c for c, _, _ in batch], [n for _, n, _ in batch], sampled)
