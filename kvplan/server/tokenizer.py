"""Text <-> token ids for `kvplan serve`, and the word form the HTTP client uses for chat prompts.

Bundled profiles have random weights and no tokenizer, so the server falls back to a word
tokenizer: one whitespace-separated word is one token; the word `t<id>` (e.g. `t1234`) is the
token `id` itself, any other word hashes to a stable ordinary id. Generated tokens decode to
` t<id>`. Thus a chat prompt built by `ids_to_words` reaches the engine as exactly those ids (so
chat requests hit the prefix cache like completions do), and every generated token is one
non-empty text piece. A model directory with tokenizer files uses its transformers tokenizer:
its chat template when it has one (rendered as vLLM renders it), and streamed text decoded
incrementally (`kvplan.server.detokenizer`), so no delta ever holds half a character.

`max_token_bytes` bounds the UTF-8 bytes one token of the vocabulary spells: a prompt longer than
max_model_len x that many bytes cannot fit, so it is refused before the (seconds-long, for
megabytes) tokenization. None for the word tokenizer (its split is C-speed).

The word form itself (`ids_to_words`) lives in `kvplan.spec.words`, shared with the HTTP client.
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from kvplan.server.detokenizer import IncrementalDetokenizer, WordDetokenizer
from kvplan.spec.words import FIRST_ORDINARY_ID, WORD_PREFIX

MIN_TOKEN_BYTES_BOUND = 16  # never bound a prompt tighter than 16 bytes a token (stripped whitespace, normalizers)


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


class Detokenizer(Protocol):
    def step(self, token_ids: Sequence[int]) -> str: ...

    def finish(self) -> str: ...


class PromptTooLong(ValueError):
    """A prompt counted past the caller's limit before it was fully tokenized (`num_tokens` of it)."""

    def __init__(self, num_tokens: int) -> None:
        super().__init__(f"{num_tokens} tokens")
        self.num_tokens = num_tokens


class ChatTemplateError(ValueError):
    """The model's chat template refused these messages (a 400, with the template's own words)."""


class TextTokenizer(Protocol):
    name: str
    max_token_bytes: int | None

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]: ...

    def encode_chat(self, messages: Sequence[dict[str, Any]], max_tokens: int | None = None) -> list[int]: ...

    def detokenizer(self, prompt_token_ids: Sequence[int]) -> Detokenizer: ...


class WordTokenizer:
    """One word, one token (see the module docstring)."""

    name = "word"
    max_token_bytes: int | None = None

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

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Raises PromptTooLong past `max_tokens` words, before hashing them (a Python loop: seconds
        for megabytes of text, where the split alone is C-speed)."""
        words = text.split()
        if max_tokens is not None and len(words) > max_tokens:
            raise PromptTooLong(len(words))
        return [self._word_id(w) for w in words]

    def encode_chat(self, messages: Sequence[dict[str, Any]], max_tokens: int | None = None) -> list[int]:
        return self.encode(messages_text(messages), max_tokens)

    def decode_token(self, token_id: int) -> str:
        return f" {WORD_PREFIX}{int(token_id)}"

    def detokenizer(self, prompt_token_ids: Sequence[int]) -> Detokenizer:
        return WordDetokenizer(self.decode_token)


class HFTokenizer:
    """A local transformers tokenizer (nothing is downloaded)."""

    name = "transformers"

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        longest = max((len(str(t).encode("utf-8")) for t in tokenizer.get_vocab()), default=0)
        self.max_token_bytes: int | None = max(longest, MIN_TOKEN_BYTES_BOUND)

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """`max_tokens` is not used: the byte bound (max_token_bytes) refuses long texts before this."""
        return list(self._tok.encode(text))

    def encode_chat(self, messages: Sequence[dict[str, Any]], max_tokens: int | None = None) -> list[int]:
        """The chat template's rendering, tokenized as vLLM does it (the template adds the special
        tokens); without a template, the contents joined by spaces."""
        if not getattr(self._tok, "chat_template", None):
            return self.encode(messages_text(messages))
        try:
            ids = self._tok.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - jinja's own errors (raise_exception in templates, bad roles)
            raise ChatTemplateError(f"the chat template refused the messages: {type(exc).__name__}: {exc}") from None
        return chat_ids(ids)

    def decode(self, token_ids: list[int]) -> str:
        return str(self._tok.decode(token_ids, skip_special_tokens=True))

    def detokenizer(self, prompt_token_ids: Sequence[int]) -> Detokenizer:
        return IncrementalDetokenizer(self.decode, prompt_token_ids)


def chat_ids(rendered: Any) -> list[int]:
    """The token ids of `apply_chat_template(tokenize=True)`, whichever type this transformers
    returns: a list of ids (4.x), a BatchEncoding / dict holding `input_ids` (5.x), or a batch of one."""
    if hasattr(rendered, "keys") and "input_ids" in rendered.keys():
        rendered = rendered["input_ids"]
    if hasattr(rendered, "tolist"):  # a tensor or an array
        rendered = rendered.tolist()
    ids = list(rendered)
    if len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])
    return ids


def load_tokenizer(model: str, vocab_size: int) -> TextTokenizer:
    """The model directory's own tokenizer when it has one, else the word tokenizer."""
    path = Path(model).expanduser()
    has_files = path.is_dir() and any(
        (path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    )
    if has_files:
        try:
            from transformers import AutoTokenizer

            return HFTokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        except Exception:  # a broken tokenizer must not stop token-id serving; the word form still works
            pass
    return WordTokenizer(vocab_size)
