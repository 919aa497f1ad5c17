"""Text <-> token ids for `kvplan serve`, and the word form the HTTP client uses for chat prompts.

Bundled profiles have random weights and no tokenizer, so the server falls back to a word
tokenizer: one whitespace-separated word is one token; the word `t<id>` (e.g. `t1234`) is the
token `id` itself, any other word hashes to a stable ordinary id. Generated tokens decode to
` t<id>`. Thus a chat prompt built by `ids_to_words` reaches the engine as exactly those ids (so
chat requests hit the prefix cache like completions do), and every generated token is one
non-empty text piece. A model directory with tokenizer files uses its transformers tokenizer
(chat template when it has one); pieces are decoded token by token, which is fine for counting
tokens but not byte-exact for multi-token characters.

The word form itself (`ids_to_words`) lives in `kvplan.spec.words`, shared with the HTTP client.
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from kvplan.spec.words import FIRST_ORDINARY_ID, WORD_PREFIX

def messages_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text of chat messages, contents joined by spaces (no template: the word tokenizer has none)."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # OpenAI content parts: keep the text ones
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return " ".join(p for p in parts if p)


class TextTokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def encode_chat(self, messages: Sequence[dict[str, Any]]) -> list[int]: ...

    def decode_token(self, token_id: int) -> str: ...


class WordTokenizer:
    """One word, one token (see the module docstring)."""

    name = "word"

    def __init__(self, vocab_size: int) -> None:
        if vocab_size <= FIRST_ORDINARY_ID:
            raise ValueError(f"vocab_size must exceed {FIRST_ORDINARY_ID}, got {vocab_size}")
        self.vocab_size = vocab_size

    def _word_id(self, word: str) -> int:
        if word.startswith(WORD_PREFIX) and word[1:].isdigit():
            value = int(word[1:])
            if value < self.vocab_size:
                return value
        return FIRST_ORDINARY_ID + zlib.crc32(word.encode("utf-8")) % (self.vocab_size - FIRST_ORDINARY_ID)

    def encode(self, text: str) -> list[int]:
        return [self._word_id(w) for w in text.split()]

    def encode_chat(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        return self.encode(messages_text(messages))

    def decode_token(self, token_id: int) -> str:
        return f" {WORD_PREFIX}{int(token_id)}"


class HFTokenizer:
    """A local transformers tokenizer (nothing is downloaded)."""

    name = "transformers"

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))

    def encode_chat(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        if getattr(self._tok, "chat_template", None):
            ids = self._tok.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True)
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return self.encode(messages_text(messages))

    def decode_token(self, token_id: int) -> str:
        return str(self._tok.decode([int(token_id)]))


def load_tokenizer(model: str, vocab_size: int) -> TextTokenizer:
    """The model directory's own tokenizer when it has one, else the word tokenizer."""
    path = Path(model).expanduser()
    has_files = path.is_dir() and any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))
    if has_files:
        try:
            from transformers import AutoTokenizer

            return HFTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        except Exception:  # a broken tokenizer must not stop token-id serving; the word form still works
            pass
    return WordTokenizer(vocab_size)
