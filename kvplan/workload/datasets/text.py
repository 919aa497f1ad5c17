"""Token counts and ids of a dataset's text: a real tokenizer (a local directory or a repo already
in the Hugging Face cache; nothing is downloaded), counted as vLLM counts them
(`tokenizer(text).input_ids`), or an estimate of 4 UTF-8 bytes a token. Ids for the bundled engine
and the prediction: the tokenizer's, folded into the model's vocabulary; without a tokenizer one id
per 4-byte chunk of the text (hashed), so repeated prompts and shared prefixes still share ids and
prefix-cache blocks."""
from __future__ import annotations

import hashlib
import math
import random
from typing import Any

from kvplan.errors import KvplanError
from kvplan.workload.limits import SPECIAL_TOKEN_IDS

BYTES_PER_TOKEN_GUESS = 4  # English text in current BPE vocabularies: ~4 bytes a token


def load_prompt_tokenizer(name: str) -> Any:
    """A transformers tokenizer from a local path or the HF cache, offline; one line on failure."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure is the user's path or cache
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise KvplanError(
            f"--tokenizer {name!r}: cannot load it offline (give a local tokenizer directory or a repo id "
            f"already in the Hugging Face cache): {first}"
        ) from None


class TokenCounter:
    """Token counts and ids of text: a real tokenizer, or the 4-bytes-a-token estimate."""

    def __init__(self, tokenizer_name: str | None, vocab_size: int) -> None:
        self.vocab = vocab_size
        self.tok = load_prompt_tokenizer(tokenizer_name) if tokenizer_name is not None else None

    def ids(self, text: str) -> list[int]:
        if self.tok is not None:
            return list(self.tok(text).input_ids)
        data = text.encode("utf-8", "replace")
        return [int.from_bytes(hashlib.blake2b(data[i:i + BYTES_PER_TOKEN_GUESS], digest_size=8).digest(), "little")
                for i in range(0, max(len(data), 1), BYTES_PER_TOKEN_GUESS)]

    def count(self, text: str) -> int:
        if self.tok is not None:
            return len(self.tok(text).input_ids)
        return max(1, math.ceil(len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN_GUESS))

    def fold(self, ids: list[int]) -> tuple[int, ...]:
        span = self.vocab - SPECIAL_TOKEN_IDS
        return tuple(SPECIAL_TOKEN_IDS + t % span for t in ids)

    def length_ids(self, n: int, seed: int) -> tuple[int, ...]:
        """Ids for a row of lengths only: `n` ids from the row's own seed."""
        rng = random.Random(seed)
        return tuple(rng.randrange(SPECIAL_TOKEN_IDS, self.vocab) for _ in range(n))
