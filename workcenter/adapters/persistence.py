"""How events are stored: orjson bytes of frozen pydantic models, with upcasting.

Adapted from the ``eventsourcing`` project's pydantic/orjson example
(examples/aggregate7), which the 9.5.6 wheel does not ship.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit
from uuid import UUID

import orjson
from eventsourcing.persistence import Mapper, Notification, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from pydantic_core import PydanticSerializationError

from workcenter.adapters.compression import COMPRESSOR_TOPIC, is_compressed, worth_deflating
from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.sqlite_settings import FACTORY_TOPIC, synchronous_env
from workcenter.adapters.store_layout import LAYOUT, upgraded
from workcenter.domain.action import ActionState
from workcenter.domain.actor import LEGACY, Actor
from workcenter.domain.conversation import ConversationState
from workcenter.domain.errors import UndecodableEvent, WorkcenterError
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.domain.resource_ledger import LedgerState
from workcenter.domain.work_item import WorkItemState

DEFAULT_DB = "workcenter.db"


class OrjsonTranscoder(Transcoder):
    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


ROW_FIELDS = frozenset({"originator_id", "originator_version"})


class PydanticMapper(Mapper[UUID]):
    """Maps frozen pydantic events to stored events and back, upcasting old shapes.

    Stored state is the library's pipeline: transcode, compress, encrypt (the
    compressor and cipher the library builds from the env), and back in reverse."""

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        data = encode_state(domain_event)
        if self.compressor and worth_deflating(data):
            data = self.compressor.compress(data)
        if self.cipher:
            data = self.cipher.encrypt(data)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(type(domain_event)),
            state=data,
        )

    # Where an undecodable event is, looked up only when one is met: the store's recorder
    # sets it (``position_of``); rows read without their position need it for the message.
    locate: Callable[[UUID | str, int], int | None] | None = None

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        try:
            data = stored_event.state
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor and is_compressed(data):
                data = self.compressor.decompress(data)
            state = self.transcoder.decode(data)
            # States written before ADR-0020 repeat these; the row's copy is the same.
            state["originator_id"] = stored_event.originator_id
            state["originator_version"] = stored_event.originator_version
            cls = resolve_topic(stored_event.topic)
            version = state.pop("class_version", 1)
            if "actor" not in state:
                # A base-field upcast for every class at once (ADR-0017): events stored
                # before actors were recorded say so; who it was is never guessed.
                state["actor"] = dict(LEGACY_ACTOR)
            while version < getattr(cls, "class_version", 1):
                getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
                version += 1
            return cls(**state)
        except Exception:
            # Whatever the codec raised (zlib, orjson, pydantic, the cipher, a topic, an
            # upcast given a damaged shape), the bytes are at fault, not the caller: one
            # typed error for every reader, naming where the damage is (ADR-0099).
            raise self.undecodable(stored_event) from None

    def undecodable(self, stored_event: StoredEvent) -> UndecodableEvent:
        position = stored_event.id if isinstance(stored_event, Notification) else None
        if position is None and self.locate is not None:
            try:
                position = self.locate(stored_event.originator_id, stored_event.originator_version)
            except Exception:  # the message does without: the damage is the error to report
                position = None
        return UndecodableEvent(
            stored_event.originator_id,
            stored_event.originator_version,
            position,
            self._failing_step(stored_event),
        )

    def _failing_step(self, stored_event: StoredEvent) -> str:
        """Which step of the decoding fails, in words that quote none of the bytes (they
        may hold anyone's text): the steps run again one by one, on the error path only."""
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
        except Exception:
            return "the cipher does not open it"
        try:
            if self.compressor and is_compressed(data):
                data = self.compressor.decompress(data)
        except Exception:
            return "it does not inflate"
        try:
            state = self.transcoder.decode(data)
        except Exception:
            return "it is not JSON"
        if not isinstance(state, dict):
            return "it is not a JSON object"
        try:
            resolve_topic(stored_event.topic)
        except Exception:
            return "its topic names no event class"
        return "its fields are not those of its event class"


# How pydantic's error names an interrupt it caught (at any depth of its own wrapping).
INTERRUPTED: Final = "KeyboardInterrupt: "


def encode_state(domain_event: Any) -> bytes:
    """The event's JSON as stored, before compression: its fields less the row's key
    (the row holds the originator's id and version already, ADR-0020), then its
    ``class_version`` when above 1.

    pydantic writes the JSON itself, in one call: the same bytes as ``orjson.dumps`` of
    ``model_dump(mode="json")``, without building the dict in between (ADR-0038)."""
    cls = type(domain_event)
    try:
        data: bytes = cls.__pydantic_serializer__.to_json(domain_event, exclude=ROW_FIELDS)
    except PydanticSerializationError as error:
        # A Ctrl-C that lands while pydantic calls back into Python comes out as its
        # error, the interrupt lost (found by an embedder, ADR-0137): raised as it was.
        if INTERRUPTED in str(error):
            raise KeyboardInterrupt from None
        raise
    version = getattr(cls, "class_version", 1)
    if version > 1:
        # The key comes last, as the dict it was once appended to wrote it.
        data = b'%s,"class_version":%d}' % (data[:-1], version)
    return data


LEGACY_ACTOR = LEGACY.model_dump(mode="json")
# Snapshots are a cache the store writes, not a decision of anyone's.
SNAPSHOT_ACTOR = Actor(kind="system", id="snapshot")


class ActionSnapshot(DomainEvent):
    """The whole state of an Action at one version, so loading skips its history."""

    actor: Actor = SNAPSHOT_ACTOR
    state: ActionState


class WorkItemSnapshot(DomainEvent):
    actor: Actor = SNAPSHOT_ACTOR
    state: WorkItemState


class LedgerSnapshot(DomainEvent):
    actor: Actor = SNAPSHOT_ACTOR
    state: LedgerState


class ConversationSnapshot(DomainEvent):
    actor: Actor = SNAPSHOT_ACTOR
    state: ConversationState


SNAPSHOT_CLASSES: dict[
    type[AggregateState],
    type[ActionSnapshot | WorkItemSnapshot | LedgerSnapshot | ConversationSnapshot],
] = {
    ActionState: ActionSnapshot,
    WorkItemState: WorkItemSnapshot,
    LedgerState: LedgerSnapshot,
    ConversationState: ConversationSnapshot,
}


def sqlite_env(db_path: str, synchronous: str | None = None) -> dict[str, str]:
    """The library env of a SQLite store at ``db_path``; ``synchronous`` (FULL or NORMAL)
    overrides ``$WORKCENTER_SQLITE_SYNCHRONOUS`` and the default (ADR-0018)."""
    return {
        "PERSISTENCE_MODULE": FACTORY_TOPIC,
        "SQLITE_DBNAME": db_path,
        # Snapshots and inline read models commit with the events (ADR-0016).
        "APPLICATION_RECORDER_TOPIC": get_topic(OneCommitSQLiteRecorder),
        **synchronous_env(synchronous),
    }


POSTGRES_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(db: str) -> bool:
    """Whether ``db`` names a PostgreSQL store (``postgresql://...``), not a SQLite file."""
    try:
        return urlsplit(db).scheme in POSTGRES_SCHEMES
    except ValueError:  # a malformed address (``[::1:5432``): refused when parsed as one
        return db.lower().startswith(tuple(f"{scheme}://" for scheme in POSTGRES_SCHEMES))


def public_url(db: str) -> str:
    """A store's address as it may be shown: a URL without its password."""
    try:
        parts = urlsplit(db)
        password = parts.password
    except ValueError:  # malformed: refused where it is parsed; shown as typed
        return db
    if password is None:
        return db
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def foreign_url_scheme(db: str) -> str | None:
    """The scheme of a URL that names no store Workcenter opens (``mysql://...``,
    ``postgresql+psycopg://...``), or None: a file's path, or a PostgreSQL URL."""
    match = _URL_SCHEME.match(db)
    if match is None or match.group(1).lower() in POSTGRES_SCHEMES:
        return None
    return match.group(1)


def resolve_db_path(db: str | os.PathLike[str] | None) -> str:
    """``db`` if given, else ``$WORKCENTER_DB``, else ./workcenter.db (a file or a URL)."""
    return os.fspath(db) if db is not None else os.environ.get("WORKCENTER_DB") or DEFAULT_DB


def store_env() -> dict[str, str]:
    return {
        "TRANSCODER_TOPIC": get_topic(OrjsonTranscoder),
        "MAPPER_TOPIC": get_topic(PydanticMapper),
        # Event, snapshot and view JSON is repetitive (keys, ids, topics): about a third
        # of the bytes once deflated (ADR-0020). Stores written before still read.
        "COMPRESSOR_TOPIC": COMPRESSOR_TOPIC,
        # States are frozen, so the cache can hand them out without copying.
        "AGGREGATE_CACHE_MAXSIZE": "5000",
        "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
    }


class StoreUnavailable(WorkcenterError):
    """The store cannot be opened: no such file, not a Workcenter store, or not writable."""

    code = "store_unavailable"
    # What a remote client is told, where the message says more than it should know (a
    # database driver's words name the server's host and port); None: the message.
    public: str | None = None


class ServerNotAnswering(StoreUnavailable):
    """The store could not be opened: its database server did not answer (down, failing
    over, still starting). The daemons wait for it at start as they do while running
    (ADR-0136); a verb fails."""

    code = "server_not_answering"


# How long ``close()`` waits for the connections in use (ADR-0136).
CLOSE_WAIT = 30.0


class StoreClosed(StoreUnavailable):
    """The WorkCenter was closed (``close()``, or its ``with`` block ended): open the
    store again to go on (a server shutting down answers 503, as for a store it cannot
    reach)."""

    code = "store_closed"


class _Uses:
    """The connections of a datastore in use, and whether it is closed. A plain lock
    and a count: this is on every command's path, ``close()`` is rare and polls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.closed = False

    def enter(self) -> None:
        with self.lock:
            if self.closed:
                raise StoreClosed(
                    "this WorkCenter is closed: open the store again (WorkCenter.open)"
                )
            self.count += 1

    def leave(self) -> None:
        with self.lock:
            self.count -= 1

    def close(self, wait: float) -> None:
        with self.lock:
            self.closed = True
        deadline = time.monotonic() + wait
        while self.count and time.monotonic() < deadline:
            time.sleep(0.005)


class _Counted:
    """A connection's context (the library's ``get_connection``), counted as in use from
    its making until its exit."""

    __slots__ = ("_inner", "_uses")

    def __init__(self, inner: Any, uses: _Uses) -> None:
        self._inner, self._uses = inner, uses

    def __enter__(self) -> Any:
        try:
            return self._inner.__enter__()
        except BaseException:
            self._uses.leave()
            raise

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self._inner.__exit__(*exc)
        finally:
            self._uses.leave()


def refuse_when_closed(datastore: Any) -> None:
    """Make every use of ``datastore`` after its ``close()`` ``StoreClosed``, on either
    database: else SQLite's pool raises the library's own error, and PostgreSQL's reads as
    a lost connection. ``close()`` first waits (up to ``CLOSE_WAIT`` seconds) for the
    connections in use to be given back: a SQLite connection closed under a thread still
    reading on it crashed the process (a segmentation fault; found by acceptance testing,
    ADR-0136); a thread that closes while it holds one itself waits the whole time, then
    closes as before. The instance's methods are wrapped, as the library builds the
    datastore (``postgres_connection.watch_connections`` does the same)."""
    close, get_connection = datastore.close, datastore.get_connection
    uses = _Uses()

    def closing() -> None:
        uses.close(CLOSE_WAIT)
        close()

    def connection(*args: Any, **kwargs: Any) -> _Counted:
        uses.enter()
        try:
            return _Counted(get_connection(*args, **kwargs), uses)
        except BaseException:
            uses.leave()
            raise

    datastore.close = closing
    datastore.get_connection = connection


# The SQLite header marks a file as a Workcenter store (ADR-0014): ``application_id``
# says whose file it is, ``user_version`` which layout it has (``store_layout``).
APPLICATION_ID = 0x57434E54  # "WCNT"
# A store written before the marker existed is recognised by tables only Workcenter makes
# (not the audit view's: a store made since the audit reads the event store has none).
LEGACY_TABLES = frozenset({"stored_events", "tracking", "wq_items"})


# How a store that is not there is said, on either database (the CLI adds what makes one).
NO_STORE: Final = "no Workcenter store at"


def is_in_memory(db_path: str) -> bool:
    """Whether the library keeps the store at ``db_path`` in memory (as it decides)."""
    return ":memory:" in db_path or "mode=memory" in db_path


# SQLite's primary result codes of a file that cannot be written or read: SQLITE_PERM,
# SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN,
# SQLITE_NOTADB.
FILE_FAULTS: Final = frozenset({3, 8, 10, 11, 13, 14, 26})
SQLITE_NOTADB: Final = 26


def sqlite_result(error: BaseException) -> int | None:
    """SQLite's primary result code of ``error`` (or of the sqlite3 error the library's
    wraps), if it carries one."""
    for seen in (error, error.__cause__):
        code = getattr(seen, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF
    return None


def _read_header(path: Path) -> tuple[int, int, set[str]]:
    """(application_id, user_version, table names) read without writing a byte."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"cannot open {path}: {error}") from None
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        user_version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as error:
        if sqlite_result(error) == SQLITE_NOTADB:
            raise StoreUnavailable(f"{path} is not a Workcenter store ({error})") from None
        # A store whose file cannot be read now (a file-size limit, a journal it may not
        # write, a damaged page) is no other application's (found by acceptance testing:
        # a sound store under a file-size limit was said not to be one, ADR-0138).
        raise StoreUnavailable(f"cannot read the store at {path} ({error})") from None
    finally:
        conn.close()
    return application_id, user_version, tables


def prepare_store_file(db_path: str, *, create: bool) -> None:
    """Refuse, before anything is written, a path that cannot hold a Workcenter store,
    then mark a new store (or one made before the marker existed) as Workcenter's.

    Without ``create`` a missing or empty file is refused: reading never makes a store.
    """
    if is_in_memory(db_path):
        return
    if not db_path:  # else taken for the current directory
        raise StoreUnavailable("the store's path is empty: give a file's path or a URL")
    if db_path.startswith("file:"):
        # The library opens names as URIs, so this one names a file, with options (mode,
        # vfs, immutable) that the checks below could not honour (ADR-0090).
        raise StoreUnavailable(
            f"{db_path} is a SQLite URI: give the file's path instead (a store in memory"
            " is :memory:)"
        )
    try:
        _prepare(Path(db_path), create=create)
    except OSError as error:  # e.g. a directory on the way that this user may not enter
        raise StoreUnavailable(f"cannot open the store at {db_path}: {error.strerror}") from None
    except ValueError:  # a NUL byte, or text the file system cannot encode
        raise StoreUnavailable(f"{db_path!r} is not a usable file name") from None


def _prepare(path: Path, *, create: bool) -> None:
    if path.is_dir():
        raise StoreUnavailable(f"{path} is a directory, not a Workcenter store")
    if not path.exists() or path.stat().st_size == 0:
        if not create:
            raise StoreUnavailable(f"{NO_STORE} {path}")
        if not path.parent.is_dir():
            raise StoreUnavailable(f"cannot create a store at {path}: no directory {path.parent}")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"cannot create a store at {path}: its directory is read-only")
        _stamp(path)
        return
    if not os.access(path, os.W_OK):
        raise StoreUnavailable(f"{path} is read-only; Workcenter writes to its store")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StoreUnavailable(
            f"{path}'s directory is read-only; SQLite writes its journal beside the store"
        )
    application_id, user_version, tables = _read_header(path)
    if application_id == APPLICATION_ID and not tables:
        # Marked, but its making did not finish (an init that failed, its disk full): no
        # older store to raise, nothing to read (found by acceptance testing, ADR-0138).
        if not create:
            raise StoreUnavailable(f"{NO_STORE} {path} (its making did not finish: run init again)")
        _stamp(path)
        return
    if application_id == APPLICATION_ID:
        if user_version > LAYOUT:
            raise _newer(path, user_version)
        if user_version < LAYOUT:
            # Upgraded before anything is written: an older Workcenter refuses it from now
            # on (ADR-0137), as one that read the events this one may write would fail.
            _raise_layout(path)
    elif application_id != 0 or (tables and not tables >= LEGACY_TABLES):
        raise StoreUnavailable(f"{path} is not a Workcenter store (another application's file)")
    elif not tables and not create:
        raise StoreUnavailable(f"{NO_STORE} {path} (an empty SQLite file)")
    if application_id != APPLICATION_ID:
        _stamp(path)  # an empty SQLite file, or a store from before the marker
        if tables:
            upgraded(str(path), 0)


def _raise_layout(path: Path) -> None:
    """The file's header raised to ``LAYOUT`` under its write lock, read again there: of
    processes opening it at once, one raises it and says so, and none lowers a layout a
    newer one wrote meanwhile (found by acceptance testing, ADR-0137)."""
    with _header_written(path) as conn:
        before = conn.execute("PRAGMA user_version").fetchone()[0]
        if before < LAYOUT:
            conn.execute(f"PRAGMA user_version = {LAYOUT}")
    if before > LAYOUT:
        raise _newer(path, before)
    if before < LAYOUT:
        upgraded(str(path), before)


def _newer(path: Path, layout: int) -> StoreUnavailable:
    return StoreUnavailable(
        f"{path} has store layout {layout}; this Workcenter reads up to {LAYOUT}"
        " (upgrade Workcenter: a newer one made or upgraded this store)"
    )


def _stamp(path: Path) -> None:
    """Mark the file as Workcenter's, of ``LAYOUT``: both or neither (a disk full between
    them left a marked file of layout 0; ADR-0138)."""
    with _header_written(path) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {LAYOUT}")


@contextmanager
def _header_written(path: Path) -> Iterator[sqlite3.Connection]:
    """A transaction of the block's statements on the file's header, begun under its
    write lock (``BEGIN IMMEDIATE``) and committed after the block; ``StoreUnavailable``
    when the file cannot be written."""
    try:
        conn = sqlite3.connect(path)
        conn.isolation_level = None  # the transaction is the one begun here
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error as error:
        raise StoreUnavailable(f"cannot write the store at {path}: {error}") from None
