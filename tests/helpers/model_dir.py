"""A tiny model directory built offline for the client tests: random-weights Llama (safetensors), a
word-level tokenizer trained in-process with a chat template, saved as transformers saves them.

Words include multi-byte characters, so streamed text carries UTF-8 beyond ASCII; the tokenizer's
decoder joins words with spaces and its pre-tokenizer splits on whitespace, so re-tokenizing the
text of N generated (non-special) tokens gives N tokens again, as AIPerf counts them.
"""
from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|user|>", "<|system|>", "<|assistant|>", "<|end|>"]
WORDS = ["hello", "world", "naïve", "café", "日本語", "東京", "привет", "ünïcödé", "✓", "emoji🙂", "the", "a", "of",
         "model", "token", "cache", "block", "page", "kv", "memory"]


def corpus_words(n: int = 300) -> list[str]:
    """The vocabulary's ordinary words: the list above plus numbered ones (w0 ... wN)."""
    return WORDS + [f"w{i}" for i in range(n - len(WORDS))]


def build_tokenizer(path: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + corpus_words())}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with one space
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  additional_special_tokens=SPECIAL[3:])
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(path))
    return tok


def build_model_dir(path: Path, seed: int = 0) -> Path:
    """config.json + model.safetensors + tokenizer files under `path` (created)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(path)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0,
                         tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(path), safe_serialization=True)
    return path
