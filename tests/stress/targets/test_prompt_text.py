"""--tokenizer: text prompts the server's tokenizer counts as the scenario's prompt length."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from model_dir import build_tokenizer

from kvplan.errors import KvplanError
from kvplan.stress.targets.prompt_text import ExactPrompts
from kvplan.workload.datasets.text import load_prompt_tokenizer


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer(path)
    return load_prompt_tokenizer(str(path))


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE with merges: decoding then re-encoding random ids changes their count."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(["the kv cache holds keys and values of every token in blocks"] * 50, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")


def _ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 32000) for _ in range(n)]


@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_completions_text_has_the_exact_length(bpe, n: int) -> None:
    prompts = ExactPrompts(bpe, "completions")
    exact = sum(len(bpe.encode(prompts.text(_ids(n, seed)))) == n for seed in range(20))
    assert exact == 20


def test_chat_text_leaves_room_for_the_template(chat_tokenizer) -> None:
    prompts = ExactPrompts(chat_tokenizer, "chat")
    assert prompts.added_tokens == 3  # <|user|>, <|end|>, <|assistant|>
    text = prompts.text(_ids(50, 1))
    rendered = chat_tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    assert len(chat_tokenizer.encode(rendered, add_special_tokens=False)) == 50


def test_special_ids_are_never_sent(chat_tokenizer) -> None:
    prompts = ExactPrompts(chat_tokenizer, "completions")
    assert not set(prompts.token_ids(range(0, 40))) & set(chat_tokenizer.all_special_ids)


def test_a_tokenizer_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KvplanError, match="--tokenizer .*cannot load it offline") as err:
        load_prompt_tokenizer(str(tmp_path / "nope"))
    assert "\n" not in str(err.value)
