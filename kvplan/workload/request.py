"""`Request`: one request to send or to time, the only request record below the results.

`kvplan predict` needs lengths and arrival times (a random dataset's requests carry no token ids);
a stress run and its prediction need the prompt's token ids too (they decide prefix-cache hits);
a dataset row may carry its own text, which an HTTP target sends as is.
"""
from __future__ import annotations

from array import array
from dataclasses import KW_ONLY, dataclass
from typing import Any

_ID_TYPE = "I"  # token ids as unsigned 32-bit: 4 bytes each instead of a tuple's ~36 (a million
# prompts of a few hundred tokens fit in a few hundred MB, not many GB)


@dataclass(frozen=True, slots=True)
class Request:
    arrival_s: float | None  # seconds after the start when the client sends it; None: closed loop (a slot frees)
    prompt_tokens: int
    output_tokens: int  # exact: sent with max_tokens=output_tokens and ignore_eos
    cached_tokens: int = 0  # prompt tokens a prefix cache already holds (whole blocks; see prefix_cache)
    _: KW_ONLY
    packed_ids: bytes | None = None  # the prompt's token ids, packed (`prompt_token_ids`); None: lengths only
    index: int = 0  # position in the stream
    request_id: str = ""
    class_name: str = ""
    shared_prefix_id: str | None = None
    shared_prefix_tokens: int = 0
    is_warmup: bool = False  # sent, but left out of the figures
    prompt_text: str | None = None  # a dataset's own prompt (sent as text to a server); None: the ids
    # a conversation's turn (`sessions`): a later turn's prompt is the last turn's prompt, the reply
    # the server gave it, then `turn_ids`; it is sent `think_s` after that reply ends (`arrival_s` None)
    session_id: str | None = None
    turn_index: int = 0
    think_s: float = 0.0
    turn_ids: bytes | None = None  # a later turn's new tokens, packed as `packed_ids`

    @property
    def follows_turn(self) -> bool:
        """A later turn of a conversation: sent once the turn before it is answered."""
        return self.turn_index > 0

    @classmethod
    def of_ids(cls, prompt_token_ids: Any, output_tokens: int, arrival_s: float | None = 0.0,
               **fields: Any) -> Request:
        """A request whose prompt is these token ids (its length is theirs; each in 0..2^32 - 1)."""
        try:
            ids = array(_ID_TYPE, prompt_token_ids)
        except OverflowError:
            raise ValueError("a token id outside 0..2^32 - 1") from None
        return cls(arrival_s, len(ids), output_tokens, packed_ids=ids.tobytes(), **fields)

    @property
    def prompt_token_ids(self) -> tuple[int, ...] | None:
        """The prompt's token ids (None: lengths only)."""
        if self.packed_ids is None:
            return None
        ids = array(_ID_TYPE)
        ids.frombytes(self.packed_ids)
        return tuple(ids)

    @property
    def new_turn_ids(self) -> tuple[int, ...]:
        """A later turn's own new tokens (appended to the conversation so far)."""
        ids = array(_ID_TYPE)
        ids.frombytes(self.turn_ids or b"")
        return tuple(ids)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The prompt's token ids (a request made from lengths only has none to give)."""
        ids = self.prompt_token_ids
        if ids is None:
            raise ValueError(f"request {self.request_id or self.index} has lengths only, no token ids")
        return ids
