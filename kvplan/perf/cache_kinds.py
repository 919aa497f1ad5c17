"""Which cache kinds the step cost times. Attention over full, sliding-window, chunked-local and
cross-attention K/V and over MLA latents is timed (the roofline's KV reads and attention FLOPs, the
kernel tables' attention ops). Any other kind (a recurrent state, a sparse index, DeepSeek-V4's
compressed entries, or a kind added later) is named in the prediction's step-cost sources, so a time
is never silently missing a cache's reads."""
from __future__ import annotations

from kvplan.spec.cache import ChunkedLocal, CrossAttention, FullAttention, MlaLatent, SlidingWindow
from kvplan.spec.model import ModelSpec

TIMED = (FullAttention, SlidingWindow, ChunkedLocal, CrossAttention, MlaLatent)
HOW = {  # what the step does with a kind it does not time, for the ones kvplan ships
    "RecurrentState": "its mixer's weights are timed, not the per-step read and write of the state",
    "IndexedSparse": "timed as the attention it indexes: the index's reads and the top-k selection are not",
    "CompressedEntries": "the compressed entries' reads are not timed (the window's attention is)",
}


def untimed_kinds(spec: ModelSpec) -> str | None:
    """One line naming the cache kinds of `spec` the step cost does not time, or None."""
    names = sorted({type(c).__name__ for layer in spec.layers for c in layer.caches if not isinstance(c, TIMED)})
    if not names:
        return None
    return "; ".join(f"{n}: {HOW.get(n, 'not timed')}" for n in names)
