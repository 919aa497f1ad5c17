"""One streamed OpenAI request over `http1`: the JSON body, the SSE events, the error texts.

Each SSE event carrying text is stamped with the read that brought its bytes (`http1` hands the
body over from `data_received` with `perf_counter()`, made relative to the run start here). The
stamp is taken once per read, before any parsing, so parsing cost never shifts a token's time.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kvplan.results.record import RequestRecord
from kvplan.spec.words import ids_to_words
from kvplan.stress.redact import redact
from kvplan.stress.targets.http1 import Http1Pool, HttpConnectError, HttpDisconnected, HttpProtocolError, HttpTimeout
from kvplan.stress.targets.prompt_text import ExactPrompts
from kvplan.stress.targets.server_features import KNOWN_KINDS, ServerFeatures
from kvplan.workload.request import Request

ApiKind = Literal["completions", "chat"]
MAX_RECORD_ERROR_CHARS = 300  # of a record's error text, kind included; cut after masking
MAX_ERROR_BODY_BYTES = 64 * 1024  # of an error page, kept for the record's text (masked, then cut to 300 chars)
MAX_SSE_LINE_BYTES = 4 * 2**20  # one `data:` event; vLLM's with logprobs of a long prompt stay far below


@dataclass(frozen=True)
class RequestSettings:
    """What every request carries beyond its prompt and length (vllm bench serve's flags):
    `body` fields (sampling, logprobs, --extra-body) over kvplan's defaults, `headers`, the
    request-id prefix, --ignore-eos forced, LoRA module names as the `model` field."""

    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    request_id_prefix: str = ""
    ignore_eos: bool = False
    lora_modules: tuple[str, ...] = ()
    lora_assignment: str = "random"  # or round-robin
    seed: int = 0  # of the random LoRA choice

    def model_for(self, index: int, default: str | None) -> str | None:
        """The `model` field of request `index`: a LoRA module (random, seeded, or round robin), else the model."""
        if not self.lora_modules:
            return default
        if self.lora_assignment == "round-robin":
            return self.lora_modules[index % len(self.lora_modules)]
        import random

        return random.Random(self.seed * 1_000_003 + index).choice(self.lora_modules)


@dataclass
class Progress:
    """What one request has seen so far (mutable, private: becomes a frozen RequestRecord)."""

    spec: Request
    arrival_s: float
    token_times_s: list[float] = field(default_factory=list)
    usage_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    progress_read_s: float = 0.0  # perf_counter of the read that brought the last content token (0: none yet)
    reply: list[str] | None = None  # the streamed text, kept when a conversation's next turn resends it


def one_line(
    exc: BaseException | str, secrets: Iterable[str | None] = (), max_chars: int = MAX_RECORD_ERROR_CHARS
) -> str:
    """An exception's (or a server's) text on one line, secrets masked, then cut to `max_chars`."""
    text = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    return redact(" ".join(text.split()), secrets, max_chars=max_chars)


def http_error_text(code: int, reason: str, headers: dict[str, str], body: bytes) -> str:
    """The error text of a non-200 answer (uncut, unmasked: `StreamClient.scrub` does both): the
    body, else the reason phrase; where a redirect points."""
    text = body.decode("utf-8", "replace").strip() or reason.strip()
    location = headers.get("location", "") if 300 <= code < 400 else ""
    return f"http {code}: " + "; ".join(
        part for part in (f"redirected to {location}" if location else "", text) if part
    )


class StreamClient:
    """The request side of a run: body building, SSE parsing, error classification.

    `features`: what the server accepts (server_features.py); `prompts`: text of exact token length
    from a real tokenizer (prompt_text.py), else text prompts are the word form `t<id> ...`."""

    def __init__(self, pool: Http1Pool, base_path: str, api: ApiKind, model: str | None,
                 clock_s: Callable[[], float], start_s: float, secret: str | None, prompts: ExactPrompts | None = None,
                 features: ServerFeatures = KNOWN_KINDS["vllm"], settings: RequestSettings | None = None) -> None:
        self.pool = pool
        self.path = f"{base_path}/v1/chat/completions" if api == "chat" else f"{base_path}/v1/completions"
        self.api = api
        self.model = model
        self.clock_s = clock_s
        self.start_s = start_s  # http1 stamps reads with perf_counter(); records are relative to this
        self._secrets = (secret,) if secret else ()
        self.prompts = prompts
        self.features = features
        self.settings = settings or RequestSettings()
        self._texts: dict[str, str] = {}
        self._messages: dict[str, list[dict[str, str]]] = {}  # a conversation's later turn on the chat API

    def prepare(self, requests: Iterable[Request]) -> None:
        """Build every text prompt before the clock starts (a tokenizer takes a while per prompt)."""
        for spec in requests:
            if spec.follows_turn:  # a conversation's later turn: its prompt is built when the reply is in
                continue
            if spec.prompt_text is not None:  # a dataset's own text: sent as it is, the server counts it
                self._texts[spec.request_id] = spec.prompt_text
            elif self.api == "chat" or not self.features.token_id_prompts:
                self._texts[spec.request_id] = self.text_of(spec.token_ids)

    def text_of(self, ids: Sequence[int]) -> str:
        """Token ids as prompt text: the tokenizer's (--tokenizer), else the word form `t<id> ...`."""
        return self.prompts.text(ids) if self.prompts is not None else ids_to_words(ids)

    def message_text(self, spec: Request) -> str:
        """A conversation turn's new message as text (text_turns.py)."""
        return (" " if self.prompts is None else "") + self.text_of(spec.new_turn_ids)  # words need a space

    def use_prompt(self, spec: Request, prompt: str | list[dict[str, str]] | None) -> str | list[dict[str, str]]:
        """Send `spec` with `prompt` (a later turn's history; None: its own); the prompt as sent."""
        if isinstance(prompt, list):
            self._messages[spec.request_id] = prompt
            return prompt
        if prompt is not None:
            self._texts[spec.request_id] = prompt
        text = self._texts.get(spec.request_id, spec.prompt_text)
        if text is None:
            text = self._texts[spec.request_id] = self.text_of(spec.token_ids)
        return [{"role": "user", "content": text}] if self.api == "chat" else text

    def __repr__(self) -> str:
        return f"StreamClient({self.path})"

    def scrub(self, text: str) -> str:
        """An error text as a record keeps it: one line, the key and credentials masked, then cut."""
        return one_line(text, self._secrets)

    def body(self, spec: Request) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": spec.output_tokens, "temperature": 0.0, "stream": True,
                                "stream_options": {"include_usage": True}, **self.features.extras(spec.output_tokens)}
        settings = self.settings
        if settings.ignore_eos:
            body["ignore_eos"] = True
        body.update(settings.body)  # vLLM's order: the sampling flags and --extra-body over the defaults
        model = settings.model_for(spec.index, self.model)
        if model is not None:
            body["model"] = model
        # a request is sent once: its prepared prompt is dropped here (a conversation's grow turn by turn)
        messages = self._messages.pop(spec.request_id, None)  # a conversation's later turn on the chat API
        text = self._texts.pop(spec.request_id, spec.prompt_text)
        if text is None and messages is None and (self.api == "chat" or not self.features.token_id_prompts):
            text = self.text_of(spec.token_ids)
        if self.api == "chat":
            body["messages"] = messages if messages is not None else [{"role": "user", "content": text}]
        elif text is not None:
            body["prompt"] = text
        else:
            ids = spec.token_ids
            body["prompt"] = self.prompts.token_ids(ids) if self.prompts is not None else list(ids)
        return body

    def _event(self, p: Progress, payload: bytes, t_s: float) -> None:
        if payload == b"[DONE]":
            p.done = True
            return
        obj = json.loads(payload)
        if not isinstance(obj, dict):
            raise ValueError("an SSE event that is not a JSON object")
        if obj.get("error"):
            err = obj["error"]
            raise ServerError(err.get("message", err) if isinstance(err, dict) else err)
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise ValueError("usage that is not a JSON object")
            p.usage_tokens = _token_count(usage.get("completion_tokens", 0), "completion_tokens")
            if usage.get("prompt_tokens") is not None:
                p.usage_prompt_tokens = _token_count(usage["prompt_tokens"], "prompt_tokens")
        for choice in obj.get("choices") or ():
            piece = choice.get("delta", {}).get("content") if self.api == "chat" else choice.get("text")
            if piece:  # content: the only thing that counts as the answer moving
                p.token_times_s.append(t_s)
                if p.reply is not None:
                    p.reply.append(piece)
                p.progress_read_s = t_s + self.start_s
                if len(p.token_times_s) > 2 * p.spec.output_tokens + 16:  # max_tokens is output_tokens
                    raise ValueError(f"more than {2 * p.spec.output_tokens + 16} tokens streamed for a request "
                                     f"of max_tokens {p.spec.output_tokens}")
            if choice.get("finish_reason"):
                p.finish_reason = choice["finish_reason"]

    def _sse_sink(self, p: Progress) -> Callable[[bytes, float], None]:
        """The body callback of a 200 response: split SSE lines, stamp each event with its read."""
        buffer = b""
        start_s = self.start_s
        event = self._event

        def sink(data: bytes, read_s: float) -> None:
            nonlocal buffer
            t_s = read_s - start_s  # one stamp per socket read: when these events reached us
            buffer = buffer + data if buffer else data
            if b"\n" not in data:
                if len(buffer) > MAX_SSE_LINE_BYTES:  # a line that never ends must not grow without bound
                    raise HttpProtocolError(f"an SSE line longer than {MAX_SSE_LINE_BYTES:,} bytes")
                return
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    event(p, line[5:].strip(), t_s)

        return sink

    async def send(self, p: Progress) -> str | None:
        """Run one request to its end; None on success, else the error text (kind first), raw:
        it may hold what the server echoed, so it is only ever stored through `scrub`."""
        spec = p.spec
        error_body: list[bytes] = []
        sse = self._sse_sink(p)
        status = 0
        head: tuple[str, dict[str, str]] = ("", {})

        def sink(data: bytes, read_s: float) -> None:
            if status == 200:
                sse(data, read_s)
            elif sum(map(len, error_body)) < MAX_ERROR_BODY_BYTES:  # an error page: keep its start for the record
                error_body.append(data)

        def on_head(code: int, reason: str, headers: dict[str, str]) -> None:
            nonlocal status, head
            status, head = code, (reason, headers)

        def on_sent() -> None:  # after building: the request's own encoding is not server latency
            p.arrival_s = self.clock_s()

        try:
            body = json.dumps(self.body(spec), separators=(",", ":"), ensure_ascii=False).encode()
            # every token may take the idle timeout, so a server that keeps to it ends within
            # (tokens + 2) x timeout: one that drips or streams on forever does not
            deadline_s = self.pool.read_timeout_s * (spec.output_tokens + 2)
            headers = {**self.settings.headers, "X-Request-Id": self.settings.request_id_prefix + spec.request_id}
            code = await self.pool.post_stream(self.path, body, headers, sink,
                                               on_sent=on_sent, on_head=on_head, total_timeout_s=deadline_s,
                                               progress=lambda: p.progress_read_s)
            if code != 200:
                return http_error_text(code, *head, b"".join(error_body))
            if not p.done and p.finish_reason is None and p.usage_tokens is None:
                # some servers (transformers serve) never send [DONE]: a finish_reason or the usage
                # chunk ends the stream as well; a clean close before either is a cut-off answer
                return "incomplete: the stream ended without [DONE], a finish_reason or usage"
            return None
        except HttpTimeout as exc:
            return f"timeout: {_text(exc)}"
        except HttpDisconnected as exc:
            return f"disconnected: {_text(exc)}"
        except HttpConnectError as exc:
            return f"connect: {_text(exc)}"
        except HttpProtocolError as exc:
            return f"protocol: {_text(exc)}"
        except ServerError as exc:
            return f"server error: {_text(exc)}"
        except (ValueError, TypeError, AttributeError) as exc:  # malformed JSON or event shape
            return f"protocol: {_text(exc)}"
        except RecursionError:  # JSON nested past the interpreter's depth: refused, not a lost run
            return "protocol: an SSE event nested too deep to read"


MAX_REPORTED_TOKENS = 2**31  # a count past it is no request's: the server's number is refused, not stored


def _token_count(value: Any, key: str) -> int:
    """A token count the server reported, as an int in [0, 2^31): else a ValueError (the request
    fails as a protocol error, recorded; the number is not copied into the result)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < MAX_REPORTED_TOKENS \
            or value != int(value):
        raise ValueError(
            f"the server reported {key} {str(value)[:40]}, not a token count in [0, {MAX_REPORTED_TOKENS:,})"
        )
    return int(value)


class ServerError(Exception):
    pass


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def make_record(p: Progress, status: str, error: str | None, finish_s: float | None, warmup: bool) -> RequestRecord:
    times = tuple(p.token_times_s)
    tokens = p.usage_tokens if p.usage_tokens is not None else len(times)
    return RequestRecord(request_id=p.spec.request_id, class_name=p.spec.class_name, arrival_s=p.arrival_s,
                         first_token_s=times[0] if times else None, token_times_s=times, finish_s=finish_s,
                         prompt_tokens=p.spec.prompt_tokens, output_tokens=tokens, status=status,  # type: ignore[arg-type]
                         error=error, is_warmup=warmup, server_input_tokens=p.usage_prompt_tokens,
                         server_output_tokens=p.usage_tokens,
                         queue_s=max(0.0, p.arrival_s - (p.spec.arrival_s if p.spec.arrival_s is not None else 0.0)))
