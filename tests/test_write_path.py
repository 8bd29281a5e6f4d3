"""The write path's levers (ADR-0038) compute what the plain path computed: the same
stored bytes for every event, the same chain digests, the same states."""

from __future__ import annotations

import functools
import hashlib
import struct
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest
from click.testing import CliRunner
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from workcenter.adapters.cli import cli
from workcenter.adapters.compression import inflate
from workcenter.adapters.persistence import ROW_FIELDS, encode_state
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.model import DomainEvent, Immutable
from workcenter.service_layer.history import hash_chain

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
# The digest of the fixed event in test_a_link_s_digest_is_pinned, computed by the code
# before ADR-0038.
PINNED = "b0c5db12eaae000c5a0eef31ccb6c74fa83c4e668b1faff3bcc0996e0915e9c7"


def plain_state(event: DomainEvent) -> bytes:
    """The stored JSON as the mapper wrote it before ADR-0038: a dict, then orjson."""
    state = event.model_dump(mode="json", exclude=ROW_FIELDS)
    version = getattr(type(event), "class_version", 1)
    if version > 1:
        state["class_version"] = version
    return orjson.dumps(state)


# Any text a user, a worker or a model may send: control characters, quotes,
# backslashes, astral and private-use characters, lone surrogates left out (pydantic
# refuses them at the boundary).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
ACTOR = st.builds(
    Actor,
    kind=st.sampled_from(("user", "worker", "system")),
    id=TEXT.filter(bool),
    caused_by=st.none() | st.builds(Actor, kind=st.just("user"), id=TEXT.filter(bool)),
)
WHEN = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
)


@st.composite
def events(draw: st.DrawFn) -> DomainEvent:
    base: dict[str, Any] = {
        "originator_id": uuid4(),
        "originator_version": draw(st.integers(1, 2**40)),
        "timestamp": draw(WHEN),
        "actor": draw(ACTOR),
    }
    kind = draw(st.sampled_from(("created", "renewed", "status", "cancelled")))
    if kind == "created":
        return wi.WorkItemCreated(
            **base,
            mode=draw(st.sampled_from(("linear", "dynamic"))),
            title=draw(TEXT),
            goal=draw(TEXT),
            acceptance_criteria=tuple(draw(st.lists(TEXT, max_size=3))),
            delivery_target=draw(st.none() | st.just("response")),
            stages=("implement",),
            stage_max_attempts=(2,),
            started=draw(st.booleans()),
        )
    if kind == "renewed":
        return act.LeaseRenewed(
            **base,
            run_id=uuid4(),
            expires_at=draw(WHEN),
            lease_seconds=draw(st.floats(allow_nan=False, allow_infinity=False)),
        )
    if kind == "status":
        return wi.StatusChanged(
            **base,
            status=draw(st.sampled_from(("ready", "running", "done"))),
            current_action_id=draw(st.none() | st.just(uuid4())),
        )
    return wi.WorkItemCancelled(**base, reason=draw(TEXT))


@settings(max_examples=500, deadline=None)
@given(event=events())
def test_an_event_is_stored_as_the_same_bytes_as_the_plain_path(event: DomainEvent) -> None:
    assert encode_state(event) == plain_state(event)


def test_a_version_above_one_is_stored_last_as_before() -> None:
    renewed = act.LeaseRenewed(
        originator_id=uuid4(),
        originator_version=3,
        timestamp=T0,
        actor=Actor(kind="worker", id="w@boot"),
        run_id=UUID(int=7),
        expires_at=T0 + timedelta(seconds=60),
        lease_seconds=60.0,
    )
    stored = orjson.loads(encode_state(renewed))
    assert list(stored)[-1] == "class_version" and stored["class_version"] == 2
    assert encode_state(renewed) == plain_state(renewed)


def test_every_event_of_the_demo_is_stored_as_the_plain_path_wrote_it(tmp_path: Path) -> None:
    """The demo writes every aggregate's events (Conversation, ledger, Runs, snapshots
    of none): each stored state is the plain path's bytes of the event it decodes to."""
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "demo", "--json"])
    assert result.exit_code == 0, result.output
    wc = WorkCenter.open(db)
    try:
        stored = wc.store.recorder.select_notifications(start=1, limit=100_000)
        topics = set()
        for notification in stored:
            event = wc.store.mapper.to_domain_event(notification)
            assert inflate(notification.state) == plain_state(event), notification.topic
            topics.add(notification.topic)
        assert len(topics) >= 20, sorted(topics)
    finally:
        wc.close()


def plain_digest(
    position: int, previous: int, event: StoredEvent, previous_digest: bytes, stream: bytes
) -> bytes:
    """The chain's digest as ADR-0028 wrote it: the parts fed one by one."""
    topic = event.topic.encode(errors="surrogateescape")
    oid = (
        event.originator_id.bytes
        if isinstance(event.originator_id, UUID)
        else event.originator_id.encode(errors="surrogateescape")
    )
    h = hashlib.sha256(hash_chain.TAG)
    h.update(struct.pack(">qqQ", position, previous, len(oid)))
    h.update(oid)
    h.update(struct.pack(">qQ", event.originator_version, len(topic)))
    h.update(topic)
    h.update(struct.pack(">Q", len(event.state)))
    h.update(event.state)
    h.update(previous_digest)
    h.update(stream)
    return h.digest()


SIGNED = st.integers(-(2**63), 2**63 - 1)
DIGESTS = st.binary(min_size=32, max_size=32)


@settings(max_examples=500, deadline=None)
@given(
    position=SIGNED,
    previous=SIGNED,
    originator=st.uuids() | st.text(max_size=40),
    version=SIGNED,
    topic=st.text(max_size=60),
    state=st.binary(max_size=600),
    previous_digest=DIGESTS,
    stream=DIGESTS,
)
def test_a_link_s_digest_is_the_plain_path_s(
    position: int,
    previous: int,
    originator: UUID | str,
    version: int,
    topic: str,
    state: bytes,
    previous_digest: bytes,
    stream: bytes,
) -> None:
    event = StoredEvent(
        originator_id=originator, originator_version=version, topic=topic, state=state
    )
    assert hash_chain.digest(position, previous, event, previous_digest, stream) == plain_digest(
        position, previous, event, previous_digest, stream
    )


def test_a_link_s_digest_is_pinned() -> None:
    """A chain written before ADR-0038 verifies after it: the digest of a fixed event."""
    event = StoredEvent(
        originator_id=UUID(int=1), originator_version=2, topic="a:B", state=b"\x78\x9c"
    )
    digest = hash_chain.digest(3, 2, event, bytes(32), b"\x01" * 32)
    assert digest.hex() == PINNED


@functools.cache
def demo_streams() -> dict[UUID, list[DomainEvent]]:
    """The events of the demo's store, by stream."""
    with tempfile.TemporaryDirectory() as directory:
        db = Path(directory) / "demo.db"
        result = CliRunner().invoke(cli, ["--db", str(db), "demo", "--json"])
        assert result.exit_code == 0, result.output
        wc = WorkCenter.open(db)
        try:
            streams: dict[UUID, list[DomainEvent]] = {}
            for stored in wc.store.recorder.select_notifications(start=1, limit=100_000):
                event = wc.store.mapper.to_domain_event(stored)
                streams.setdefault(event.originator_id, []).append(event)
            return streams
        finally:
            wc.close()


FOLDS: dict[type[DomainEvent], Callable[[Any, Any], Any]] = {
    wi.WorkItemEvent: wi.evolve,
    act.ActionEvent: act.evolve,
    rl.LedgerEvent: rl.evolve,
    conv.ConversationEvent: conv.evolve,
}


def _states(streams: dict[UUID, list[DomainEvent]]) -> list[Immutable]:
    """Every state of every stream, in order, folded by the domain's own evolve."""
    states: list[Immutable] = []
    for events in streams.values():
        (evolve,) = [f for base, f in FOLDS.items() if isinstance(events[0], base)]
        state = None
        for event in events:
            state = evolve(state, event)
            states.append(state)
    return states


def _same(a: BaseModel, b: BaseModel) -> bool:
    return (
        type(a) is type(b)
        and a.__dict__ == b.__dict__
        and a.__pydantic_fields_set__ == b.__pydantic_fields_set__
        and a.__pydantic_extra__ == b.__pydantic_extra__
        and a.__pydantic_private__ == b.__pydantic_private__
        and a == b
    )


def test_every_state_of_the_demo_folds_as_with_pydantic_s_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's streams (WorkItem, Actions with Runs, ledger, Conversation) folded with
    the fast copy and with pydantic's: the same states, field for field."""
    streams = demo_streams()
    fast = _states(streams)
    monkeypatch.setattr(Immutable, "model_copy", BaseModel.model_copy)
    plain = _states(streams)
    assert len(fast) == len(plain) > 100
    assert all(_same(a, b) for a, b in zip(fast, plain, strict=True))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_copy_with_any_update_is_pydantic_s(data: st.DataObject) -> None:
    states = _states(demo_streams())
    state = data.draw(st.sampled_from(states))
    names = data.draw(st.lists(st.sampled_from(sorted(type(state).model_fields)), unique=True))
    other = data.draw(st.sampled_from([s for s in states if type(s) is type(state)]))
    update = {name: getattr(other, name) for name in names}
    deep = data.draw(st.booleans())
    ours = state.model_copy(update=update or data.draw(st.none() | st.just({})), deep=deep)
    theirs = BaseModel.model_copy(state, update=update, deep=deep)
    assert _same(ours, theirs)
    assert ours is not state and ours.__dict__ is not state.__dict__


class WrappedActor(BaseModel):
    """Actor as serialised before ADR-0038: a wrapping serialiser dropped a null cause."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    id: str
    caused_by: WrappedActor | None = None

    @model_serializer(mode="wrap")
    def _omit_no_cause(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("caused_by") is None:
            data.pop("caused_by", None)
        return data


class WrappedBrief(BaseModel):
    """Brief as serialised before ADR-0038: a wrapping serialiser dropped an empty rationale."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: str
    approach: str = ""
    expected_outcome: str = ""
    rationale: str = ""

    @model_serializer(mode="wrap")
    def _omit_no_rationale(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("rationale"):
            data.pop("rationale", None)
        return data


CAUSES = st.deferred(
    lambda: st.none() | st.builds(Actor, kind=st.just("user"), id=TEXT, caused_by=CAUSES)
)


@settings(max_examples=300, deadline=None)
@given(actor=st.builds(Actor, kind=st.just("worker"), id=TEXT, caused_by=CAUSES))
def test_an_actor_serialises_as_with_the_wrapping_serialiser(actor: Actor) -> None:
    wrapped = WrappedActor.model_validate(actor.model_dump())
    for mode in ("json", "python"):
        assert actor.model_dump(mode=mode) == wrapped.model_dump(mode=mode)
    assert actor.model_dump_json() == wrapped.model_dump_json()


@settings(max_examples=300, deadline=None)
@given(brief=st.builds(act.Brief, objective=TEXT, approach=TEXT, rationale=st.just("") | TEXT))
def test_a_brief_serialises_and_hashes_as_with_the_wrapping_serialiser(brief: act.Brief) -> None:
    wrapped = WrappedBrief.model_validate(brief.model_dump())
    for mode in ("json", "python"):
        assert brief.model_dump(mode=mode) == wrapped.model_dump(mode=mode)
    assert brief.model_dump_json() == wrapped.model_dump_json()
