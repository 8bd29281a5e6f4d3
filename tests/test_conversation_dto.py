"""The conversation DTO is bounded by count and by bytes of text, newest kept, and
never carries what a provider or the mailbox holds."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import orjson

from workcenter.domain import conversation as conv
from workcenter.projections.budget import MAX_DTO_BYTES
from workcenter.projections.conversation_dto import MAX_MESSAGES, conversation_dto

AT = datetime(2026, 1, 1, tzinfo=UTC)


def state(*texts: str) -> conv.ConversationState:
    item = uuid4()
    messages = tuple(
        conv.Message(
            id=uuid4(), turn_id=uuid4(), role="user", status="completed", text=t, created_at=AT
        )
        for t in texts
    )
    return conv.ConversationState(
        id=conv.conversation_id_for(item), version=len(texts), work_item_id=item, messages=messages
    )


def test_no_conversation_yet_is_empty() -> None:
    dto = conversation_dto(None)
    assert (dto["messages"], dto["turns"], dto["omittedMessages"]) == ([], [], 0)


def test_the_newest_messages_are_kept_by_count() -> None:
    dto = conversation_dto(state(*(f"m{n}" for n in range(MAX_MESSAGES + 5))))
    assert len(dto["messages"]) == MAX_MESSAGES and dto["omittedMessages"] == 5
    assert dto["messages"][-1]["text"] == f"m{MAX_MESSAGES + 4}"
    assert dto["messages"][0]["text"] == "m5"


def test_long_texts_are_cut_by_bytes_under_the_dto_budget() -> None:
    wide = "€" * conv.TEXT_LIMIT  # 3 bytes a character
    dto = conversation_dto(state(*([wide] * 60)))
    assert 0 < len(dto["messages"]) < 60 and dto["omittedMessages"] == 60 - len(dto["messages"])
    assert len(orjson.dumps(dto)) < MAX_DTO_BYTES
