"""Bounds that keep a workload's cost finite: a typo such as 1e-300 req/s or 2**64 requests is an
error naming the limit, not a run that never ends or eats the machine's memory."""
from __future__ import annotations

MAX_REQUESTS = 1_000_000
MAX_DURATION_S = 7 * 86_400.0
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-3, 1e6
MAX_TOKENS = 10_000_000  # per prompt or output
SPECIAL_TOKEN_IDS = 3  # ids 0..2 (pad/bos/eos in the tiny models) never appear in prompts
