"""`Request`: one request to send or to time, the only request record below the results.

`kvplan predict` needs lengths and arrival times (a random dataset's requests carry no token ids);
a stress run and its prediction need the prompt's token ids too (they decide prefix-cache hits);
a dataset row may carry its own text, which an HTTP target sends as is.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    arrival_s: float | None  # seconds after the start when the client sends it; None: closed loop (a slot frees)
    prompt_tokens: int
    output_tokens: int  # exact: sent with max_tokens=output_tokens and ignore_eos
    cached_tokens: int = 0  # prompt tokens a prefix cache already holds (whole blocks; see prefix_cache)
    _: KW_ONLY
    prompt_token_ids: tuple[int, ...] | None = None  # None: lengths only
    index: int = 0  # position in the stream
    request_id: str = ""
    class_name: str = ""
    shared_prefix_id: str | None = None
    shared_prefix_tokens: int = 0
    is_warmup: bool = False  # sent, but left out of the figures
    prompt_text: str | None = None  # a dataset's own prompt (sent as text to a server); None: the ids

    @classmethod
    def of_ids(cls, prompt_token_ids: tuple[int, ...], output_tokens: int, arrival_s: float | None = 0.0,
               **fields: Any) -> Request:
        """A request whose prompt is these token ids (its length is theirs)."""
        return cls(arrival_s, len(prompt_token_ids), output_tokens, prompt_token_ids=tuple(prompt_token_ids),
                   **fields)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The prompt's token ids (a request made from lengths only has none to give)."""
        if self.prompt_token_ids is None:
            raise ValueError(f"request {self.request_id or self.index} has lengths only, no token ids")
        return self.prompt_token_ids
