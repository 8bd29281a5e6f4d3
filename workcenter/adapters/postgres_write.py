"""A PostgreSQL command's write in ONE exchange, its lock held by the server alone
(ADR-0070).

The two-exchange write (ADR-0051) holds the library's table lock from its first
exchange's reply until its commit, so the lock spans the client's work between the two
(the chain's links, the views' rows) and, with more processes than cores, the time the
client waits to be scheduled. Here everything that needs the lock is done by the server:

- the library's lock, notify and insert, as its own insert does them, and the chain's
  links, by ``wc_write_events`` (plpgsql, ADR-0075), with ``wc_chain_digest``, a SQL
  function whose bytes equal ``hash_chain.digest`` (``tests/test_chain_sql.py``);
- the views' positions by ``wc_write_events``, from the notification ids just inserted;
- the views' rows were built by the client before the pipeline starts: the work queue's
  and the mailbox's do not depend on positions, and the detail view's DTOs were built
  before the lock (ADR-0069) and are written with their positions read by the server.
  ``wc_write_events`` checks what the client assumed when it built them (no view behind, except
  the detail view on the streams of the items it rewrites, and each stream the DTOs
  read at the version they read) and raises ``FALLBACK`` otherwise: the client rolls
  back and writes the two-exchange way.

The functions live in the store's schema (stores share databases, one schema each) and
are created or replaced when the store's tables are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from eventsourcing.persistence import StoredEvent

from workcenter.projections import sql
from workcenter.projections.inline import Prebuilt
from workcenter.service_layer.history import hash_chain

# SQLSTATEs raised by ``wc_write_events``: class "WC" is no PostgreSQL class, so neither can be
# mistaken for a server's own error.
FALLBACK: Final = "WCF01"  # something the client's rows did not see: write the other way
CUT: Final = "WCH01"  # the chain's head is gone: ``hash_chain.HistoryConflict``

# How a command's write commits (ADR-0053, ADR-0088):
# - "on": the COMMIT returns once its WAL is flushed, and the table lock is held until
#   then, so no one sees a write before it is durable;
# - "early-release": the COMMIT does not wait for the flush, so the lock is released
#   before it; FLUSH then waits for it, in the same exchange, so the command still
#   returns only once its write is durable, but others may see the write up to a flush
#   earlier, and a server crash in that time loses it (never a write acknowledged);
# - "off": no flush is waited for; a server crash may lose acknowledged writes.
CommitMode = Literal["on", "early-release", "off"]
COMMIT_MODES: Final[tuple[CommitMode, ...]] = ("on", "early-release", "off")
# A transaction that writes WAL (a logical decoding message no one decodes) and commits
# synchronously: its COMMIT returns once the WAL up to its own record is flushed, and
# with it every commit before it, the write's included. A transaction that writes no
# WAL commits without a flush, however synchronous_commit is set.
FLUSH: Final = ("BEGIN", "SELECT pg_logical_emit_message(true, 'workcenter', '')", "COMMIT")

# The server's clock, read by a benchmark's write to time its hold of the table lock.
CLOCK: Final = "SELECT extract(epoch FROM clock_timestamp()) AS t"

_TAG_HEX: Final = hash_chain.TAG.hex()
_GENESIS: Final = f"'\\x{hash_chain.GENESIS.hex()}'::bytea"


def _digest(
    position: str,
    previous: str,
    oid: str,
    version: str,
    topic: str,
    state: str,
    previous_digest: str,
    stream_digest: str,
) -> str:
    """``hash_chain.digest`` as a SQL expression over the SQL expressions given: lengths
    and integers as 8-byte big-endian (int8send; struct's ">q" and ">Q" agree for every
    length), the id's 16 bytes, the topic in UTF-8 (the database's encoding, in which
    convert_to changes nothing)."""
    return (
        f"sha256('\\x{_TAG_HEX}'::bytea || int8send({position}) || int8send({previous})"
        f" || int8send(16) || uuid_send({oid}) || int8send({version})"
        f" || int8send(octet_length(convert_to({topic}, 'UTF8'))) || convert_to({topic}, 'UTF8')"
        f" || int8send(octet_length({state})) || {state} || {previous_digest}"
        f" || {stream_digest})"
    )


def function_statements(schema: str, events: str, chain: str, channel: str) -> list[str]:
    """``CREATE OR REPLACE`` statements of the store's functions, names schema-qualified
    (``channel``: the one the library's insert notifies)."""
    s = f'"{schema}"'
    ev = f"{s}.{events}"
    channel = '"' + channel.replace('"', '""') + '"'
    digest = f"""
CREATE OR REPLACE FUNCTION {s}.wc_chain_digest(
  bigint, bigint, uuid, bigint, text, bytea, bytea, bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT {_digest("$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8")}
$f$"""
    write = f"""
CREATE OR REPLACE FUNCTION {s}.wc_write_events(
  oids uuid[], versions bigint[], topics text[], states bytea[], lock_timeout text,
  chained boolean, views text[], lenient text, lenient_streams uuid[], wanted_ids uuid[],
  wanted_versions bigint[], OUT ids bigint[], OUT started double precision)
LANGUAGE plpgsql AS $f$
DECLARE
  first_id bigint; last_id bigint; head_position bigint; head_digest bytea;
  prev bigint; prev_digest bytea; stream_digest bytea; link bytea;
  e record; v text; pos bigint; i int; j int;
  -- By each event's place in the arguments: its stream's link before it, and its own.
  stream_links bytea[]; links bytea[];
BEGIN
  -- Before any read of the event table: an operator's lock on it is waited for no
  -- longer than the lock timeout here either.
  PERFORM set_config('lock_timeout', lock_timeout, true);
  IF chained THEN
    -- Each stream's last link before this write, read before the lock, which is then
    -- held for less (ADR-0109): an event's predecessor in its stream committed, with
    -- its link, before this write was decided on it; one in this write is linked below.
    FOR i IN 1 .. cardinality(oids) LOOP
      stream_digest := NULL;
      IF NOT EXISTS (SELECT 1 FROM generate_subscripts(oids, 1) k
          WHERE oids[k] = oids[i] AND versions[k] = versions[i] - 1) THEN
        SELECT c.digest INTO stream_digest FROM {ev} p JOIN {s}.{chain} c
          ON c.position = p.notification_id
          WHERE p.originator_id = oids[i] AND p.originator_version = versions[i] - 1;
      END IF;
      stream_links[i] := stream_digest;
    END LOOP;
  END IF;
  -- What the library's insert does (its lock timeout, above, lock, notify and insert),
  -- here so that the whole write is one statement (ADR-0075). The lock serialises the
  -- writers: their ids commit in order, and these are the newest.
  LOCK TABLE {ev} IN EXCLUSIVE MODE;
  -- Returned: when the lock was granted (the client times the hold).
  started := extract(epoch FROM clock_timestamp());
  NOTIFY {channel};
  WITH inserted AS (
    INSERT INTO {ev} (originator_id, originator_version, topic, state)
    SELECT * FROM unnest(oids, versions, topics, states) RETURNING notification_id)
  SELECT array_agg(notification_id ORDER BY notification_id) INTO ids FROM inserted;
  first_id := ids[1];
  last_id := ids[cardinality(ids)];
  IF chained THEN
    SELECT position, digest INTO head_position, head_digest FROM {s}.{chain}
      ORDER BY position DESC LIMIT 1;
    IF head_position IS NOT NULL AND (head_position >= first_id OR NOT EXISTS (
        SELECT 1 FROM {ev} WHERE notification_id = head_position)) THEN
      RAISE EXCEPTION USING ERRCODE = '{CUT}', MESSAGE = format(
        'the event chained at position %s, the hash chain''s head, is gone (this write'
        ' starts at position %s): events were deleted from the end of the history after'
        ' they were chained; run `workcenter audit verify`', head_position, first_id);
    END IF;
    -- Events written with the chain off are chained first, by the client's code.
    IF EXISTS (SELECT 1 FROM {ev} WHERE notification_id > COALESCE(head_position, 0)
        AND notification_id < first_id) THEN
      RAISE EXCEPTION USING ERRCODE = '{FALLBACK}', MESSAGE = 'unchained events before';
    END IF;
    prev := COALESCE(head_position, 0);
    prev_digest := COALESCE(head_digest, {_GENESIS});
    FOR e IN SELECT notification_id, originator_id, originator_version, topic, state
        FROM {ev} WHERE notification_id BETWEEN first_id AND last_id
        ORDER BY notification_id LOOP
      i := NULL;
      stream_digest := NULL;
      FOR j IN 1 .. cardinality(oids) LOOP
        IF oids[j] = e.originator_id AND versions[j] = e.originator_version THEN
          i := j;
        ELSIF oids[j] = e.originator_id AND versions[j] = e.originator_version - 1 THEN
          stream_digest := links[j];  -- linked by this loop already
        END IF;
      END LOOP;
      IF i IS NULL THEN  -- never, while the library locks the table
        RAISE EXCEPTION 'event % is not this write''s', e.notification_id;
      END IF;
      -- The stream's previous link: linked by this loop, or stored before.
      stream_digest := COALESCE(stream_digest, stream_links[i], {_GENESIS});
      -- The expression of wc_chain_digest, written out: PostgreSQL plans a SQL function
      -- called from plpgsql at every call, an expression once per session.
      link := {
        _digest(
            "e.notification_id",
            "prev",
            "e.originator_id",
            "e.originator_version",
            "COALESCE(e.topic, '')",
            "COALESCE(e.state, ''::bytea)",
            "prev_digest",
            "stream_digest",
        )
    };
      INSERT INTO {s}.{chain} VALUES (e.notification_id, prev, link);
      links[i] := link;
      prev := e.notification_id;
      prev_digest := link;
    END LOOP;
  END IF;
  IF cardinality(views) > 0 THEN
    -- In the order given, as every writer of the views takes them (ADR-0032).
    FOREACH v IN ARRAY views LOOP
      PERFORM pg_advisory_xact_lock(hashtext('workcenter:{schema}:' || v));
    END LOOP;
    FOREACH v IN ARRAY views LOOP
      SELECT notification_id INTO pos FROM {s}.tracking WHERE application_name = v;
      IF EXISTS (SELECT 1 FROM {ev} WHERE notification_id > COALESCE(pos, 0)
          AND notification_id < first_id
          AND (v IS DISTINCT FROM lenient OR originator_id <> ALL(lenient_streams))) THEN
        RAISE EXCEPTION USING ERRCODE = '{FALLBACK}', MESSAGE = 'a view is behind';
      END IF;
    END LOOP;
    INSERT INTO {s}.tracking SELECT n, last_id FROM unnest(views) n
      ON CONFLICT (application_name) DO UPDATE SET notification_id = excluded.notification_id
      WHERE {s}.tracking.notification_id < excluded.notification_id;
  END IF;
  FOR i IN 1 .. COALESCE(cardinality(wanted_ids), 0) LOOP
    IF (SELECT COALESCE(max(originator_version), 0) FROM {ev}
        WHERE originator_id = wanted_ids[i]) <> wanted_versions[i] THEN
      RAISE EXCEPTION USING ERRCODE = '{FALLBACK}',
        MESSAGE = format('stream %s moved on from version %s', wanted_ids[i], wanted_versions[i]);
    END IF;
  END LOOP;
END
$f$"""
    # The write before ADR-0075, which followed the library's own insert.
    drop = (
        f"DROP FUNCTION IF EXISTS {s}.wc_write("
        "uuid[], bigint[], boolean, text[], text, uuid[], uuid[], bigint[])"
    )
    return [digest, write, drop]


def send_begin(c: Any, mode: CommitMode) -> None:
    """A write's ``BEGIN``, and its commit's setting (``SET LOCAL``: this transaction
    only) unless the mode is "on"."""
    c.execute("BEGIN")
    if mode != "on":
        c.execute("SET LOCAL synchronous_commit = off")


def send_flush(c: Any, mode: CommitMode) -> None:
    """After a write's ``COMMIT``, in its exchange: ``FLUSH`` if the mode is
    "early-release"."""
    if mode == "early-release":
        for statement in FLUSH:
            c.execute(statement)


def install(datastore: Any, events: str, chain: str, channel: str) -> None:
    """Create or replace the functions, under an advisory lock: processes opening one
    store at once would otherwise race (``tuple concurrently updated``)."""
    schema = datastore.schema
    with datastore.transaction(commit=True) as c:
        c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"workcenter:{schema}:functions",))
        for statement in function_statements(schema, events, chain, channel):
            c.execute(statement)


def call_arguments(
    stored: Sequence[StoredEvent], lock_timeout: int, chained: bool, prebuilt: Prebuilt
) -> tuple[Any, ...]:
    """The eleven arguments of ``wc_write_events``, in its order."""
    return (
        [e.originator_id for e in stored],
        [e.originator_version for e in stored],
        [e.topic for e in stored],
        [e.state for e in stored],
        f"{lock_timeout}s",
        chained,
        list(prebuilt.views),
        prebuilt.lenient,
        list(prebuilt.lenient_streams),
        [i for i, _ in prebuilt.wanted],
        [v for _, v in prebuilt.wanted],
    )


def send(
    conn: Any,
    schema: str,
    events: str,
    stored: Sequence[StoredEvent],
    lock_timeout: int,
    chained: bool,
    prebuilt: Prebuilt,
) -> Any:
    """Send ``wc_write_events`` (the lock, the insert, the chain's links, the views' checks
    and positions) and the rows built before the lock; returns the cursor of the call,
    whose one row holds the events' notification ids and the server's clock when the lock
    was granted (seconds since the epoch)."""
    call = conn.cursor()
    call.execute(
        f'SELECT * FROM "{schema}".wc_write_events(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)',
        call_arguments(stored, lock_timeout, chained, prebuilt),
        prepare=True,
    )
    rows = sql.PortableCursor(conn.cursor())
    prebuilt.send_rows(rows)
    for item, originator_id, version, blob in prebuilt.detail_rows:
        # The position is the notification id of the item's last event here, known to the
        # server only.
        rows.raw.execute(
            f'INSERT INTO dv_details SELECT %s, notification_id, %s FROM "{schema}".{events}'
            " WHERE originator_id = %s AND originator_version = %s ON CONFLICT (work_item_id)"
            " DO UPDATE SET position = excluded.position, dto = excluded.dto",
            (item, blob, originator_id, version),
            prepare=True,
        )
    return call


@contextlib.contextmanager
def held_back(conn: Any) -> Iterator[None]:
    """Statements executed in the pipeline inside this block are queued, not sent, until
    the next sync: the server then gets the whole write at once, so it never holds the
    table lock while this process adapts the statements after the ``LOCK``, or waits to
    be scheduled to do so (ADR-0070).

    psycopg sends a pipelined statement as soon as it is executed (its pipeline's
    ``_communicate_gen``); that private method is shadowed on the pipeline for the
    block's length. Should psycopg rename it, nothing is held back and the write is
    as correct, only its lock held longer (``tests/test_one_exchange.py`` notices)."""
    pipeline = getattr(conn, "_pipeline", None)
    if pipeline is None or not hasattr(pipeline, "_communicate_gen"):
        yield
        return

    def nothing() -> Iterator[Any]:
        return
        yield  # a generator that sends nothing and waits for nothing

    pipeline._communicate_gen = nothing
    try:
        yield
    finally:
        del pipeline._communicate_gen
