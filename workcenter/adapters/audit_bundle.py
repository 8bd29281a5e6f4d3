"""Writing an item's audit bundle to a file, and checking one offline, without the
store (ADR-0060): every link, the anchor, and the replay of its decisions."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import Environment

from workcenter.adapters import cipher
from workcenter.adapters.compression import SmallBlobZlibCompressor
from workcenter.adapters.persistence import OrjsonTranscoder, PydanticMapper, is_in_memory
from workcenter.application import WorkCenter
from workcenter.bootstrap import decision_rules
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules
from workcenter.service_layer.history import bundle
from workcenter.service_layer.history.hash_chain import Verdict
from workcenter.service_layer.queries.decision_audit import ReplayReport, replay_events


def export(
    wc: WorkCenter, work_item_id: UUID, to: str | os.PathLike[str], *, replace: bool = False
) -> int:
    """Write the item's bundle to ``to`` (whole, never half-written); the number of events
    in it. A file there is replaced only when ``replace`` says so, and never the store's
    own files (ADR-0081)."""
    if not str(to).strip():
        raise InvalidInput("the bundle needs a file name")
    target = Path(to)
    there = _what_is_at(target)
    # Replaced means renamed over: a device, a pipe or a link there was replaced by a
    # plain file (/dev/null as root; found by acceptance testing, ADR-0145).
    if there not in (None, "file"):
        raise InvalidInput(f"{target} is {there}, not a file: write the bundle to a file")
    if target.resolve() in _store_files(wc):
        raise InvalidInput(f"{target} is a file of the store itself: write the bundle elsewhere")
    if there is not None and not replace:
        raise InvalidInput(f"{target} exists: give --force to replace it")
    partial = target.with_name(target.name + ".partial")
    count = -1
    try:
        with partial.open("wb") as out:
            for line in wc.maintenance.export_bundle(work_item_id):
                out.write(line)
                count += 1
        partial.replace(target)
    except OSError as error:
        raise InvalidInput(f"cannot write the bundle to {target}: {error.strerror}") from None
    finally:
        partial.unlink(missing_ok=True)  # gone once renamed; a failed export leaves nothing
    return count


def _what_is_at(target: Path) -> str | None:
    """What the name ``target`` holds itself, its links not followed: None for nothing."""
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidInput(f"cannot write the bundle to {target}: {error.strerror}") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a device, a pipe or a socket"


def _store_files(wc: WorkCenter) -> set[Path]:
    """The files of a SQLite store (its database, journal and WAL files); none for
    PostgreSQL."""
    pool = getattr(getattr(wc.store.factory, "datastore", None), "pool", None)
    name = getattr(pool, "db_name", None)
    if not isinstance(name, str) or is_in_memory(name):
        return set()
    base = Path(name).resolve()
    return {base, *(base.with_name(base.name + end) for end in ("-wal", "-shm", "-journal"))}


@dataclass(frozen=True)
class BundleVerdict:
    links: Verdict
    replay: ReplayReport | None
    note: str | None = None  # why the decisions were not replayed

    @property
    def ok(self) -> bool:
        return self.links.ok and self.replay is not None and self.replay.same

    def json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "links": self.links.json(),
            "replay": self.replay.json() if self.replay else None,
            "note": self.note,
        }


def verify(path: str | os.PathLike[str], rules: DecisionRules | None = None) -> BundleVerdict:
    """Check the bundle at ``path`` with no store: its links and anchor, then (when they
    hold) the replay of its decisions with today's rules."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InvalidInput(f"cannot read the bundle {path}: {error.strerror}") from None
    found = bundle.read(data)
    links = bundle.verify_links(found)
    if not links.ok:
        return BundleVerdict(links, None, "the links are broken: the decisions were not replayed")
    mapper = _mapper(bool(found.head.get("sealed")))
    if mapper is None:
        note = f"the events are sealed: set ${cipher.KEY_ENV} to replay their decisions"
        return BundleVerdict(links, None, note)

    def decode(event: StoredEvent) -> DomainEvent:
        decoded: DomainEvent = mapper.to_domain_event(event)
        return decoded

    try:
        events = bundle.decoded(found, decode)
    except Exception as error:  # a sealed bundle read with another key, or no codec
        note = f"the events cannot be decoded ({type(error).__name__})"
        return BundleVerdict(links, None, note)
    item_id = UUID(str(found.head["work_item_id"]))
    return BundleVerdict(links, replay_events(item_id, events, rules or decision_rules()))


def _mapper(sealed: bool) -> PydanticMapper | None:
    """The store's codec: orjson, deflated, and AES when the store was sealed."""
    sealer = None
    if sealed:
        key = cipher.configured_key()
        if key is None:
            return None
        from eventsourcing.cipher import AESCipher  # the cipher extra, only when sealed

        sealer = AESCipher(Environment(env={"CIPHER_KEY": key}))
    return PydanticMapper(OrjsonTranscoder(), SmallBlobZlibCompressor(), sealer)
