"""Prompts as text of an exact token length, for chat and for servers without token-id prompts.

With `--tokenizer PATH|REPO` (a local directory or a repo already in the Hugging Face cache;
nothing is downloaded), a request's prompt ids are mapped into that tokenizer's ordinary ids,
decoded, and the text re-encoded and cut or topped up until it encodes to exactly the length
the server will count minus what the server adds itself: the chat template's tokens around one
user message, or the BOS a completions prompt gets. Without a tokenizer the text is the word form
`t<id> ...` (exact for `kvplan serve` only; other servers count several tokens a word, and the
run's server_input_tokens show it).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_ROUNDS = 8  # decode/encode rounds to reach the exact length; the last text is kept after that


class ExactPrompts:
    """Text prompts that the server's tokenizer counts as the scenario's prompt length."""

    def __init__(self, tokenizer: Any, api: str) -> None:
        self._tok = tokenizer
        self._special = set(int(t) for t in getattr(tokenizer, "all_special_ids", []) or [])
        self._vocab = len(tokenizer)
        self._safe: dict[int, bool] = {}  # id -> whether it spells whole characters that encode back to itself
        self.added_tokens = self._server_added(api)

    def _server_added(self, api: str) -> int:
        """Tokens the server adds around the text: the chat template's, or the BOS of a prompt."""
        tok = self._tok
        if api == "chat" and getattr(tok, "chat_template", None):
            rendered = tok.apply_chat_template(
                [{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True
            )
            return len(tok.encode(rendered, add_special_tokens=False))
        return len(tok.encode("", add_special_tokens=True))

    def _is_safe(self, t: int) -> bool:
        """A byte-level token holding half a character decodes to U+FFFD and never comes back: skip those."""
        if t not in self._safe:
            text = self._tok.decode([t])
            self._safe[t] = (
                bool(text.strip()) and "\ufffd" not in text and self._tok.encode(text, add_special_tokens=False) == [t]
            )
        return self._safe[t]

    def ordinary_id(self, token_id: int) -> int:
        """`token_id` in this vocabulary: the next id that is neither special nor half a character."""
        start = t = int(token_id) % self._vocab
        while t in self._special or not self._is_safe(t):
            t = (t + 1) % self._vocab
            if t == start:  # no safe id at all (not a real tokenizer): plain modulo, specials skipped
                return next(i for i in range(self._vocab) if i not in self._special)
        return t

    def token_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids mapped into this tokenizer's vocabulary, special ids avoided."""
        return [self.ordinary_id(t) for t in ids]

    def text(self, ids: Sequence[int]) -> str:
        tok = self._tok
        n = max(1, len(ids) - self.added_tokens)
        pool = self.token_ids(ids) or [self.ordinary_id(0)]
        got = pool[:n]
        text = tok.decode(got)
        for _ in range(MAX_ROUNDS):
            got = tok.encode(text, add_special_tokens=False)
            if len(got) == n:
                break
            # too long: cut; too short (merges): top up from the request's own ids, round and round
            got = got[:n] if len(got) > n else got + [pool[i % len(pool)] for i in range(len(got), n)]
            text = tok.decode(got)
        return text
