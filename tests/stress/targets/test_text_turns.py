"""Conversations against an OpenAI server (--target): each later turn is sent after the turn before
it ends (plus its think time), with the history as a chat client resends it: the last prompt, the
streamed reply and the new message (completions: one text; chat: the messages). Checked on what a
recording server received."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from server_helpers import ThreadServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kvplan.cli import main
from kvplan.results.result import load_result
from kvplan.stress.targets.text_turns import TextTurns
from kvplan.workload.request import Request as Turn


def _app(seen: list[dict]) -> Starlette:
    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "served", "object": "model"}]})

    def route(chat: bool):
        async def handler(request: Request) -> Response:
            body = json.loads(await request.body())
            entry = {"body": body, "received_s": time.monotonic(), "id": request.headers.get("x-request-id")}
            seen.append(entry)
            n, number = body["max_tokens"], len(seen)

            async def events():
                for i in range(n):
                    piece = f" r{number}.{i}"
                    choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                    yield f"data: {json.dumps({'choices': [choice]})}\n\n"
                entry["ended_s"] = time.monotonic()
                yield f"data: {json.dumps({'choices': [], 'usage': {'completion_tokens': n, 'prompt_tokens': 5}})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return handler

    return Starlette(routes=[Route("/health", lambda _: Response()), Route("/v1/models", models),
                             Route("/v1/completions", route(False), methods=["POST"]),
                             Route("/v1/chat/completions", route(True), methods=["POST"])])


def _scenario(tmp_path: Path, arrival: dict) -> Path:
    data = {"name": "chat-turns", "model": "tiny-llama", "num_requests": 6, "seed": 3, "arrival": arrival,
            "workload": {"sessions": {"num_sessions": 2, "turns": 3, "shared_prefix_tokens": 16,
                                      "first_turn_tokens": 8, "turn_tokens": 4, "output_tokens": 3,
                                      "think_time_s": 0.05, "think_distribution": "constant"}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api, arrival", [("completions", {"type": "concurrency", "concurrency": 2}),
                                          ("chat", {"type": "poisson", "rate_per_s": 50})])
def test_later_turns_resend_the_history_after_the_turn_before_ends(tmp_path: Path, api: str, arrival: dict) -> None:
    seen: list[dict] = []
    server = ThreadServer(_app(seen))
    server.start()
    try:
        with pytest.raises(SystemExit) as info:
            main(["stress", "--scenario", str(_scenario(tmp_path, arrival)), "--target", server.url, "--api", api,
                  "--server-kind", "openai", "--out", str(tmp_path / "out"), "--no-progress"])
        assert info.value.code == 0
    finally:
        server.stop()
    assert len(seen) == 6
    result = load_result(tmp_path / "out" / "result.json")
    assert all(r.status == "ok" for r in result.records())
    by_id = {e["id"]: e for e in seen}
    for session in ("session-0", "session-1"):
        chain = sorted((e for e in seen if e["id"] and f"{session}-turn-" in e["id"]), key=lambda e: e["id"])
        assert len(chain) == 3, [e["id"] for e in seen]
        for before, after in zip(chain, chain[1:]):
            assert after["received_s"] >= before["ended_s"] + 0.05 - 0.005  # think time after the last token
            reply = "".join(f" r{seen.index(before) + 1}.{i}" for i in range(3))
            if api == "chat":
                old, new = before["body"]["messages"], after["body"]["messages"]
                assert new[:len(old)] == old and new[len(old)] == {"role": "assistant", "content": reply}
                assert new[len(old) + 1]["role"] == "user" and len(new) == len(old) + 2
            else:
                assert after["body"]["prompt"].startswith(before["body"]["prompt"] + reply)
                assert len(after["body"]["prompt"]) > len(before["body"]["prompt"] + reply)  # the new message
    assert len(by_id) == 6  # every request carried its own id


def test_a_failed_turn_ends_its_conversation() -> None:
    turns = TextTurns("completions", lambda t: " next")
    first = Turn(0.0, 4, 2, index=0, request_id="s-turn-0", session_id="s")
    second = Turn(None, 8, 2, index=1, request_id="s-turn-1", session_id="s", turn_index=1, turn_ids=b"")
    third = Turn(None, 12, 2, index=2, request_id="s-turn-2", session_id="s", turn_index=2, turn_ids=b"")
    assert turns.first_turns([first, second, third]) == [first]
    turns.sent(first, "hello")
    assert [t.request_id for t in turns.ended("s-turn-0", None, 1.0)] == ["s-turn-1", "s-turn-2"]
    assert not turns.due and not turns.next
