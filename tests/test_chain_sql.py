"""The hash chain's digest computed by the PostgreSQL server (ADR-0070) is the one
``hash_chain.digest`` computes: the one-exchange write chains a command's events on the
server, and ``audit verify`` checks them in Python, so a single differing byte would
break every history written that way.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import postgres
import psycopg
import pytest

from workcenter.application import WorkCenter
from workcenter.service_layer.history import hash_chain

TOPICS = (
    "workcenter.domain.work_item:WorkItemCreated",
    "",
    "ünïcödé:Évènement",
    "日本語のトピック",
    "emoji \U0001f600 topic",
)


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


@pytest.fixture
def server(wc: WorkCenter) -> Iterator[Any]:
    """A connection of ``wc``'s store (its search path names the store's schema)."""
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    with datastore.get_connection() as conn:
        yield conn


def sql_digest(
    conn: Any, schema: str, position: int, previous: int, event: Any, *digests: bytes
) -> bytes:
    row = conn.execute(
        f'SELECT "{schema}".wc_chain_digest(%s, %s, %s, %s, %s, %s, %s, %s) AS d',
        (
            position,
            previous,
            event.originator_id,
            event.originator_version,
            event.topic,
            event.state,
            *digests,
        ),
    ).fetchone()
    return bytes(row["d"])


def random_event(rng: random.Random) -> Any:
    from eventsourcing.persistence import StoredEvent

    size = rng.choice((0, 0, 1, 31, 32, 33, 255, 4096))
    return StoredEvent(
        originator_id=uuid.UUID(int=rng.getrandbits(128)),
        originator_version=rng.choice((1, 2, 7, 2**31 + 5, 2**62)),
        topic=rng.choice(TOPICS) + str(rng.randrange(1000)),
        state=rng.randbytes(size),
    )


def test_the_server_digest_equals_the_python_digest_on_many_random_events(
    wc: WorkCenter, server: Any
) -> None:
    schema = wc.store.factory.datastore.schema  # type: ignore[attr-defined]
    rng = random.Random(70)
    for _ in range(300):
        event = random_event(rng)
        position = rng.randrange(1, 2**62)
        previous = rng.choice((0, position - 1, rng.randrange(0, position)))
        digests = [
            rng.choice((hash_chain.GENESIS, rng.randbytes(32))),
            rng.choice((hash_chain.GENESIS, rng.randbytes(32))),
        ]
        expected = hash_chain.digest(position, previous, event, *digests)
        assert sql_digest(server, schema, position, previous, event, *digests) == expected, event


def test_an_empty_state_and_an_empty_topic_digest_alike(wc: WorkCenter, server: Any) -> None:
    from eventsourcing.persistence import StoredEvent

    schema = wc.store.factory.datastore.schema  # type: ignore[attr-defined]
    event = StoredEvent(originator_id=uuid.uuid4(), originator_version=1, topic="", state=b"")
    g = hash_chain.GENESIS
    assert sql_digest(server, schema, 1, 0, event, g, g) == hash_chain.digest(1, 0, event, g, g)


def test_the_functions_are_installed_idempotently(wc: WorkCenter) -> None:
    """Opening a store again replaces them in place (CREATE OR REPLACE)."""
    wc.store.recorder.create_table()  # type: ignore[attr-defined]
    wc.store.recorder.create_table()  # type: ignore[attr-defined]
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    with datastore.get_connection() as conn:
        count = conn.execute(
            "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname LIKE 'wc\\_%%'",
            (datastore.schema,),
        ).fetchone()["count"]
    assert count >= 2
    with (
        pytest.raises(psycopg.errors.UndefinedFunction),
        psycopg.connect(
            host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
        ) as other,
    ):
        other.execute("SELECT public.wc_chain_digest(1, 0, NULL, 1, '', '', '', '')")
