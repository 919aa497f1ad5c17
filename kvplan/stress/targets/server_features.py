"""What an OpenAI-compatible server accepts beyond the OpenAI API, so a run sends only that.

vLLM and SGLang take token-id prompts on /v1/completions and the `ignore_eos` / `min_tokens`
extensions that make output lengths exact; TGI, llama.cpp's server, `transformers serve` and
OpenAI itself take text prompts only, and some refuse unknown fields outright (transformers serve:
HTTP 422 "Unexpected fields in the request"). `--server-kind` names the server; `auto` (the
default) asks the server itself with a few one-token requests before the clock starts:

  1. completions: a token-id prompt, else a text prompt (chat: a text message); a 4xx to both ->
     the server refuses the simplest request: one line naming its answer, exit 2 (a 5xx is the
     server failing: the run goes on with the OpenAI fields only and records the failures)
  2. that prompt with `ignore_eos` and `min_tokens`, else with `ignore_eos` alone, else neither

Without the extensions a run asks for `max_tokens` only and records the lengths the server gave.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from kvplan.errors import KvplanError

ServerKind = Literal["auto", "vllm", "sglang", "tgi", "openai"]
SERVER_KINDS: tuple[str, ...] = ("auto", "vllm", "sglang", "tgi", "openai")
PROBE_PROMPT_IDS = [11, 12, 13, 14]  # ordinary ids in any vocabulary
PROBE_TEXT = "hello"

# (status, body text) of one non-streamed POST with this JSON body
Post = Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]


@dataclass(frozen=True)
class ServerFeatures:
    kind: str  # the --server-kind, or "auto: <what answered>"
    token_id_prompts: bool  # /v1/completions takes `prompt: [ids]`
    ignore_eos: bool
    min_tokens: bool

    def extras(self, output_tokens: int) -> dict[str, Any]:
        """The body fields that pin the output length, where the server takes them."""
        out: dict[str, Any] = {}
        if self.ignore_eos:
            out["ignore_eos"] = True
        if self.min_tokens:
            out["min_tokens"] = output_tokens
        return out

    def info(self) -> dict[str, Any]:
        return {"server_kind": self.kind, "token_id_prompts": self.token_id_prompts, "ignore_eos": self.ignore_eos,
                "min_tokens": self.min_tokens}


KNOWN_KINDS = {
    "vllm": ServerFeatures("vllm", True, True, True),
    "sglang": ServerFeatures("sglang", True, True, True),
    "tgi": ServerFeatures("tgi", False, False, False),
    "openai": ServerFeatures("openai", False, False, False),
}


def check_server_kind(kind: str) -> None:
    if kind not in SERVER_KINDS:
        raise KvplanError(f"--server-kind {kind!r}: choose one of {', '.join(SERVER_KINDS)}")


def _probe_body(api: str, model: str | None, token_ids: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": 1, "temperature": 0.0}
    if model is not None:
        body["model"] = model
    if api == "chat":
        body["messages"] = [{"role": "user", "content": PROBE_TEXT}]
    else:
        body["prompt"] = list(PROBE_PROMPT_IDS) if token_ids else PROBE_TEXT
    return body


async def probe_features(post: Post, api: str, model: str | None, describe: Callable[[str], str]) -> ServerFeatures:
    """Ask the server what it accepts (see the module docstring). `describe` masks and cuts a
    server's answer for an error line."""
    token_ids = api == "completions"
    status, text = await post(_probe_body(api, model, token_ids))
    if status != 200 and token_ids:
        token_ids = False
        status, text = await post(_probe_body(api, model, False))
    if 400 <= status < 500:  # the request is refused: the user's to fix
        raise KvplanError(f"the server refused a one-token {api} request (HTTP {status}): {describe(text)}; "
                          "check --served-model-name, --api and the server's log")
    if status != 200:  # the server fails (5xx, no answer): the run records what it does, nothing is assumed
        return ServerFeatures(f"auto (unprobed: HTTP {status} to the probe)", False, False, False)
    base = _probe_body(api, model, token_ids)
    for extras in ({"ignore_eos": True, "min_tokens": 1}, {"ignore_eos": True}):
        status, _ = await post({**base, **extras})
        if status == 200:
            return ServerFeatures("auto", token_ids, True, "min_tokens" in extras)
    return ServerFeatures("auto", token_ids, False, False)
