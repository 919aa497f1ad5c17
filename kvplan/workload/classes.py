"""A request class: a share of the traffic (`weight`) with its prompt and output lengths and,
optionally, a prefix it shares with every class naming the same prefix id. A shared prefix's
token ids come from the seed and the prefix id alone, so every class naming that id starts with
the same tokens."""
from __future__ import annotations

from numpy.random import PCG64, Generator, SeedSequence
from pydantic import Field, model_validator

from kvplan.validation import FieldIssue, StrictModel
from kvplan.workload.lengths import LengthSpec
from kvplan.workload.limits import MAX_TOKENS, SPECIAL_TOKEN_IDS

_PREFIX_SALT = 0x50524546  # "PREF": keeps prefix streams apart from the request streams


class SharedPrefix(StrictModel):
    id: str = Field(min_length=1, max_length=200)  # one id names one prefix: same id, same token ids
    tokens: int = Field(gt=0, le=MAX_TOKENS)


class RequestClass(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    weight: float = Field(default=1.0, ge=0, le=1e9)
    prompt_tokens: LengthSpec  # the whole prompt, shared prefix included
    output_tokens: LengthSpec
    shared_prefix: SharedPrefix | None = None

    @model_validator(mode="after")
    def _prefix_fits(self) -> RequestClass:
        upper = self.prompt_tokens.upper_tokens
        if self.shared_prefix is not None and upper is not None and upper <= self.shared_prefix.tokens:
            raise FieldIssue(
                ("shared_prefix", "tokens"),
                f"{self.shared_prefix.tokens} leaves no room in prompts of at most "
                f"{upper} tokens (prompt_tokens counts the prefix)",
            )
        return self

    @property
    def prefix_tokens(self) -> int:
        return self.shared_prefix.tokens if self.shared_prefix else 0

    @property
    def min_prompt_tokens(self) -> int:
        """The shortest prompt a draw gives: its length's floor, and one token past the prefix."""
        return max(self.prompt_tokens.lower_tokens, self.prefix_tokens + 1)


def prefix_token_ids(seed: int, prefix_id: str, tokens: int, vocab_size: int) -> tuple[int, ...]:
    """The token ids of shared prefix `prefix_id` (depends on the seed and the id only)."""
    rng = Generator(PCG64(SeedSequence([seed, _PREFIX_SALT, *prefix_id.encode("utf-8")])))
    return tuple(int(t) for t in rng.integers(SPECIAL_TOKEN_IDS, vocab_size, size=tokens))
