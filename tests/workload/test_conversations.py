"""Conversations from a ShareGPT-format file (kvplan.workload.conversations), counted at ~4 bytes
a token (no tokenizer: ceil(bytes / 4)) so every length below is worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.workload import conversations as conv_module
from kvplan.workload.conversations import Conversations

DATA = Path(__file__).resolve().parents[1] / "data" / "conversations" / "three.json"


def test_turns_prompts_and_replies_as_worked_out() -> None:
    notes: list[str] = []
    reqs = Conversations(path=str(DATA)).requests(0, 1000, 4096, None, notes)
    # a: system (14 bytes: 4) + "Name three prime numbers please." (32: 8) = 12, reply 20 bytes: 5;
    #    turn 1: 12 + 5 + "And the next one?" (17: 5) = 22, reply "Seven." 2
    # b: the role/content form: "Hello there" 3, reply 29 bytes: 8
    # c: no user message: dropped; d: two user messages in a row are one turn (1 + 1), the last unanswered dropped
    assert [(r.request_id, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        ("conversation-0-turn-0", 12, 5), ("conversation-0-turn-1", 22, 2),
        ("conversation-1-turn-0", 3, 8), ("conversation-3-turn-0", 2, 2)]
    assert len(reqs[1].new_turn_ids) == 5 and reqs[1].follows_turn and not notes


def test_a_conversation_is_cut_before_a_turn_past_max_model_len() -> None:
    notes: list[str] = []
    reqs = Conversations(path=str(DATA)).requests(0, 1000, 20, None, notes)  # a's turn 1 needs 22 + 2
    assert [r.request_id for r in reqs][:2] == ["conversation-0-turn-0", "conversation-1-turn-0"]
    assert notes and "cut" in notes[0]


def test_a_message_past_any_context_is_refused_before_it_is_tokenized(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conv_module, "MAX_MESSAGE_BYTES", 64)  # the rule, at a size a test can write
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x" * 65},
                                                   {"from": "gpt", "value": "ok"}]}]))
    with pytest.raises(KvplanError, match="conversation 0: a message of 65 characters"):
        Conversations(path=str(path)).requests(0, 1000, 4096, None, [])


def test_not_a_list_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"conversations": []}')
    with pytest.raises(KvplanError, match="a list of conversations"):
        Conversations(path=str(path)).requests(0, 1000, 4096, None, [])
