"""The word form of token ids, shared by kvplan's HTTP client and `kvplan serve`.

Bundled profiles have random weights and no tokenizer, so prompts travel as words: the word
`t<id>` (e.g. `t1234`) is the token `id` itself. The client writes chat prompts this way and the
server's word tokenizer maps them back to exactly those ids.
"""
from __future__ import annotations

from collections.abc import Iterable

WORD_PREFIX = "t"
FIRST_ORDINARY_ID = 3  # ids 0..2 are pad/bos/eos in the tiny profiles; hashed words never map there


def ids_to_words(token_ids: Iterable[int]) -> str:
    """`[5, 17]` -> `"t5 t17"`: a text prompt the word tokenizer maps back to the same ids."""
    return " ".join(f"{WORD_PREFIX}{int(t)}" for t in token_ids)
