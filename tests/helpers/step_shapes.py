"""A step's shape written in the order the cost models' tests think in: (tokens, seqs, prefill tokens,
context tokens, attention pairs, sampled, prefill seqs, prefill pairs)."""
from __future__ import annotations

from typing import Any

from kvplan.perf.step_cost import StepShape


def at(tokens: Any, seqs: Any, prefill_tokens: Any, context_tokens: Any, attention_pairs: Any, sampled: Any,
       prefill_seqs: Any = None, prefill_pairs: Any = None) -> StepShape:
    return StepShape(tokens, seqs, context_tokens, attention_pairs, prefill_tokens, sampled, prefill_seqs,
                     prefill_pairs)
