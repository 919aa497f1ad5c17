"""vLLM's `prefix_repetition` dataset (vllm/benchmarks/datasets.py, PrefixRepetitionRandomDataset,
0.19.1): `num_prefixes` random prefixes of `prefix_tokens`, each followed by `num_requests //
num_prefixes` random suffixes of `suffix_tokens`, every request asking `output_tokens`; the list
shuffled unless --disable-shuffle. So exactly num_prefixes x (num_requests // num_prefixes)
requests (vLLM does not oversample this one), and each prefix's blocks are hits after its first
request once prefix caching is on."""
from __future__ import annotations

from collections.abc import Iterator

from numpy.random import Generator
from pydantic import Field

from kvplan.errors import KvplanError
from kvplan.validation import StrictModel
from kvplan.workload.classes import prefix_token_ids
from kvplan.workload.limits import MAX_REQUESTS, SPECIAL_TOKEN_IDS
from kvplan.workload.request import Request

MAX_TOKENS = 2**21  # one prompt part: past any model's context


class PrefixRepetition(StrictModel):
    prefix_tokens: int = Field(default=256, ge=0, le=MAX_TOKENS)  # vLLM's defaults
    suffix_tokens: int = Field(default=256, ge=0, le=MAX_TOKENS)
    num_prefixes: int = Field(default=10, ge=1, le=MAX_REQUESTS)
    output_tokens: int = Field(default=128, ge=1, le=MAX_TOKENS)
    shuffle: bool = True  # vLLM shuffles unless --disable-shuffle

    def requests(self, num_requests: int | None, seed: int, vocab_size: int, max_model_len: int,
                 rng: Generator) -> Iterator[Request]:
        """The dataset's requests in send order (lengths exact: kvplan's prompts are token ids)."""
        if num_requests is None:
            raise KvplanError("the prefix_repetition dataset needs num_requests (vLLM's --num-prompts), not a duration")
        per_prefix = num_requests // self.num_prefixes
        if per_prefix == 0:
            raise KvplanError(f"num_requests ({num_requests}) must be at least the number of prefixes "
                              f"({self.num_prefixes}), as vLLM requires")
        if self.prefix_tokens + self.suffix_tokens + self.output_tokens > max_model_len:
            raise KvplanError(f"prefix {self.prefix_tokens} + suffix {self.suffix_tokens} + output "
                              f"{self.output_tokens} tokens exceed max_model_len {max_model_len}")
        if self.prefix_tokens + self.suffix_tokens == 0:
            raise KvplanError("prefix_repetition needs a prompt: prefix and suffix are both 0 tokens")
        order = [(p, j) for p in range(self.num_prefixes) for j in range(per_prefix)]
        if self.shuffle:
            order = [order[i] for i in rng.permutation(len(order))]
        prefixes: dict[int, tuple[int, ...]] = {}
        for p, _ in order:
            if p not in prefixes:
                prefixes[p] = prefix_token_ids(seed, f"repeated-prefix-{p}", self.prefix_tokens, vocab_size)
            suffix = rng.integers(SPECIAL_TOKEN_IDS, vocab_size, size=self.suffix_tokens)
            yield Request.of_ids(prefixes[p] + tuple(int(t) for t in suffix), self.output_tokens, None,
                                 class_name="prefix_repetition", shared_prefix_id=f"repeated-prefix-{p}",
                                 shared_prefix_tokens=self.prefix_tokens)
