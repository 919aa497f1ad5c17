"""Incremental detokenization: streamed deltas never hold half a UTF-8 character and join to the
text of all ids decoded together; chat templates' token ids whatever type transformers returns."""
from __future__ import annotations

import pytest

from kvplan.server.detokenizer import IncrementalDetokenizer
from kvplan.server.tokenizer import HFTokenizer, chat_ids

TEXT = "naïve café 日本語 привет 🙂 ✓ hello world"


@pytest.fixture(scope="module")
def byte_level():
    """A byte-level BPE trained here with few merges: CJK, Cyrillic and emoji split across tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["hello world naive cafe"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")


def _stream(tok: HFTokenizer, prompt: list[int], ids: list[int], per_step: int = 1) -> list[str]:
    detok = tok.detokenizer(prompt)
    pieces = [detok.step(ids[i:i + per_step]) for i in range(0, len(ids), per_step)]
    return [*pieces, detok.finish()]


@pytest.mark.parametrize("per_step", [1, 2, 3])
def test_deltas_never_split_a_character(byte_level, per_step: int) -> None:
    tok = HFTokenizer(byte_level)
    ids = byte_level.encode(TEXT, add_special_tokens=False)
    assert len(ids) > len(TEXT.split()) * 2  # multi-byte characters really are several tokens here
    pieces = _stream(tok, byte_level.encode("prompt", add_special_tokens=False), ids, per_step)
    assert not any("\ufffd" in p for p in pieces)
    assert "".join(pieces) == byte_level.decode(ids)
    # decoded one token at a time, as before, the same ids give replacement characters
    assert any("\ufffd" in byte_level.decode([t]) for t in ids)


def test_special_tokens_skipped_and_incomplete_tail_flushed(byte_level) -> None:
    tok = HFTokenizer(byte_level)
    eos = byte_level.convert_tokens_to_ids("<eos>")
    cut = byte_level.encode("日", add_special_tokens=False)[:-1]  # half a character at the very end
    pieces = _stream(tok, [], [*byte_level.encode("ab", add_special_tokens=False), eos, *cut])
    assert "".join(pieces[:-1]) == "ab" and pieces[-1] == byte_level.decode(cut)


def test_leading_space_of_the_first_token_kept() -> None:
    """With prompt context the first delta keeps the space a token-alone decode would lose."""
    words = {1: "hello", 2: "world"}
    detok = IncrementalDetokenizer(lambda ids: " ".join(words[i] for i in ids), [1])
    assert detok.step([2]) == " world"


@pytest.mark.parametrize("rendered", [[1, 2, 3], {"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1]},
                                      {"input_ids": [[1, 2, 3]]}, [[1, 2, 3]]])
def test_chat_ids_of_every_return_type(rendered) -> None:
    assert chat_ids(rendered) == [1, 2, 3]


def test_chat_ids_of_a_batch_encoding(byte_level) -> None:
    from transformers import BatchEncoding

    assert chat_ids(BatchEncoding({"input_ids": [4, 5], "attention_mask": [1, 1]})) == [4, 5]
