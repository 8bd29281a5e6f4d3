"""A store's events copied into a new store: under a new cipher key, to rotate it
(``rekey``, ADR-0033), or under its own, to move it to another database, most often
from a SQLite file to PostgreSQL as a deployment grows (``copy``, ADR-0125; see
docs/deployment.md).

The events are the store; snapshots and read models are caches of them. So the
copy reads the old store's event log in order and writes it to an empty new store, a
page per commit in the same order and at the same positions (gaps included), and
rebuilds the new store's read models. ``copy``
writes each event's stored bytes as they are (its key is the store's), so the hash
chain, whose links are over those bytes, is the source's link for link: an anchor kept
from the source verifies the copy. ``rekey`` decodes each event with the old key
(``$WORKCENTER_CIPHER_KEY``) and seals it with the new one
(``$WORKCENTER_NEW_CIPHER_KEY``, empty to store without encryption): a new chain.

Writers must be stopped while it runs; then they are pointed at the new store. If
they are not, the copy is still consistent (ADR-0050): it holds the events up to
the source's head as it was when the copy began, and every command commits its
events as one run of consecutive positions, in order, so that head ends no
command half way. What was written after it is not copied, and ``Copied`` says
so (``complete`` false, with both positions): the CLI then exits 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol, cast

from eventsourcing.persistence import StoredEvent

from workcenter.adapters import cipher, copy_mark, event_log
from workcenter.adapters.cipher import KEY_ENV, StoreKeyRefused
from workcenter.adapters.persistence import (
    StoreUnavailable,
    is_in_memory,
    is_postgres_url,
    public_url,
)
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.projections.lifecycle import Progress
from workcenter.service_layer.history.late_links import LateLinks
from workcenter.service_layer.history.proof import VerifyProgress

NEW_KEY_ENV: Final = "WORKCENTER_NEW_CIPHER_KEY"
PAGE: Final = 500


class ViewsNotBuilt(StoreUnavailable):
    """Every event was copied, but the new store's read models could not be built (its
    database went away then): a rebuild finishes the copy; nothing needs removing."""


class PositionedInserts(Protocol):
    """Both stores' recorders: a page of events written at the positions given."""

    def insert_at(self, positions: Sequence[int], stored: Sequence[StoredEvent]) -> None: ...


class LateRecord(Protocol):
    """Both stores' chain tables: what opens chained (``hash_chain.chain_unchained``)."""

    def linked_late(self) -> list[LateLinks]: ...

    def keep_late(self, linked: Sequence[LateLinks]) -> None: ...


def _late_record(center: WorkCenter) -> LateRecord:
    return cast(LateRecord, center.store.recorder.chain)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Copied:
    events: int
    encrypted: bool
    position: int  # the source's head when the copy began: the copy holds all up to it
    # The source's head when the copy ended; None when the source could not be read then.
    source_head: int | None
    # Runs held in the source under live leases when the copy ended: a worker still at
    # work on it, which writes there, not to the copy (found by acceptance testing).
    runs_in_hand: int = 0

    @property
    def complete(self) -> bool:
        """Whether nothing was written to the source while it was copied (known)."""
        return self.source_head == self.position

    def json(self) -> dict[str, Any]:
        return asdict(self) | {"complete": self.complete}


@contextmanager
def _key(value: str | None) -> Iterator[None]:
    """``$WORKCENTER_CIPHER_KEY`` set to ``value`` (unset for None) while opening."""
    previous = os.environ.get(KEY_ENV)
    if value:
        os.environ[KEY_ENV] = value
    else:
        os.environ.pop(KEY_ENV, None)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = previous


def copy(
    source: str,
    target: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    building: Progress | None = None,
    checking: VerifyProgress | None = None,
) -> Copied:
    """Copy ``source`` into the empty ``target`` under the same key,
    ``$WORKCENTER_CIPHER_KEY`` (or none). ``progress``, ``building`` and ``checking`` as
    for ``rekey``."""
    key = cipher.configured_key(KEY_ENV)
    return _copied(
        source, target, key, "the store's key", (checking, progress, building), as_stored=True
    )


def rekey(
    source: str,
    target: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    building: Progress | None = None,
    checking: VerifyProgress | None = None,
) -> Copied:
    """Copy ``source`` (opened with ``$WORKCENTER_CIPHER_KEY``) into the empty ``target``
    under ``$WORKCENTER_NEW_CIPHER_KEY``. ``checking(phase, done, total)`` is called as
    the source's history is checked, before anything is made (``verify_history``'s
    progress). ``progress(position, head)`` is called after each page: what it raises (a
    stop) leaves ``target`` holding the events copied so far, an incomplete copy to
    remove. ``building(view, done, total)`` is called as the new store's read models are
    built from its events, after the last page (the projections' rebuild progress): what
    it raises leaves a whole copy whose read models are built by its first open or a
    rebuild."""
    if NEW_KEY_ENV not in os.environ:
        # Only a variable set to nothing asks for a copy without encryption: an unset one
        # is more often a key forgotten, and would write the store's events in the clear.
        raise InvalidInput(
            f"${NEW_KEY_ENV} is not set: set it to the new key, or to an empty value to copy"
            " the store without encryption"
        )
    new_key = cipher.configured_key(NEW_KEY_ENV)  # refused in its own name, before anything
    return _copied(
        source, target, new_key, "the new key", (checking, progress, building), as_stored=False
    )


def _copied(
    source: str,
    target: str,
    new_key: str | None,
    key_named: str,
    callbacks: tuple[VerifyProgress | None, Callable[[int, int], None] | None, Progress | None],
    *,
    as_stored: bool,
) -> Copied:
    """``source`` copied into the empty ``target`` under ``new_key`` (None: without
    encryption), which the refusals call ``key_named``; ``as_stored``: each event's stored
    bytes as they are (the same key), else decoded and sealed again under ``new_key``.
    ``callbacks``: the history check's, the pages' and the read models' progress."""
    checking, progress, building = callbacks
    shown = public_url(target)
    if is_in_memory(target):
        # Copied, then thrown away with the process (found by acceptance testing).
        raise InvalidInput("a store in memory ends with this process: name a file or a URL")
    if _same_store(source, target):
        raise InvalidInput(f"the new store at {shown} is the store being copied: name another")
    with WorkCenter.open(source, create=False, inline_projections=False) as old:
        refuse_a_broken_history(old, checking)  # before the new store is made
        with _key(new_key):
            try:
                new = WorkCenter.open(target, inline_projections=False)
            except StoreKeyRefused:
                # Its refusal would name $WORKCENTER_CIPHER_KEY, which is not what opened it.
                raise _not_a_new_store(target, new_key, key_named) from None
        try:
            if count := event_log.events_held(new.store):
                raise InvalidInput(
                    f"the new store at {shown} is not empty: it holds {count} events; name a"
                    " new, empty store (a copy stopped while its read models were built is"
                    " whole: `projections rebuild` on it finishes it)"
                )
            head = old.store.recorder.max_notification_id() or 0
            datastore = new.store.factory.datastore  # type: ignore[attr-defined]
            events_table = new.store.recorder.events_table_name  # type: ignore[attr-defined]
            copy_mark.mark(datastore, events_table, public_url(source), head, shown)
            copied = _copy(old, new, head, progress, as_stored)
            # What the source's opens chained stays said of the copy (ADR-0137).
            linked = [late for late in _late_record(old).linked_late() if late.first <= head]
            if linked:
                _late_record(new).keep_late(linked)
            copy_mark.unmark(datastore)
            try:
                new.maintenance.rebuild_projection(progress=building)
            except WorkcenterError as error:
                raise ViewsNotBuilt(
                    f"every event up to position {head:,} was copied to {shown}, but its read"
                    f" models were not built ({type(error).__name__}: {error}); run"
                    f" `workcenter --db {shown} projections rebuild`"
                    f"{opened_with(new_key, as_stored=as_stored)} once it can be reached"
                    " (the copy then holds the store as it was at that position)"
                ) from error
        finally:
            new.close()
        try:
            after: int | None = old.store.recorder.max_notification_id() or 0
            in_hand = old.maintenance.leases().live
        except StoreUnavailable:
            # Every event up to the head is copied; only the check for later ones failed.
            after, in_hand = None, 0
    return Copied(
        events=copied,
        encrypted=new_key is not None,
        position=head,
        source_head=after,
        runs_in_hand=in_hand,
    )


def opened_with(new_key: str | None, *, as_stored: bool) -> str:
    """What the new store is opened with, where it is not the source's key: a rekey's
    copy under the new key, or none (found by acceptance testing: the rebuild it said to
    run was refused for the key it was run with, ADR-0138)."""
    if as_stored:
        return ""
    if new_key is None:
        return f" with ${KEY_ENV} unset (the copy is not encrypted)"
    return f" with ${KEY_ENV} set to the new key (${NEW_KEY_ENV}'s)"


def refuse_a_broken_history(old: WorkCenter, progress: VerifyProgress | None = None) -> None:
    """``InvalidInput`` when the store's chain does not prove its events: the copy
    chains the events again as they are stored, so an edited event became a history
    that verifies (found by acceptance testing, ADR-0134). Checked before the new
    store is made; events written during the copy are those of the store's
    own writes, chained as they were made."""
    verdict = old.maintenance.verify_history(snapshots=False, progress=progress)
    if verdict.broken is not None:
        broken = verdict.broken
        raise InvalidInput(
            f"the store's history is broken at position {broken.position} ({broken.kind}):"
            " a copy would chain what is stored now as if it were the history; nothing was"
            " copied. Run `workcenter audit verify` to see what changed"
        )


def _not_a_new_store(target: str, new_key: str | None, key_named: str) -> InvalidInput:
    """Why ``target``, a store made in the other mode than ``new_key``'s, is no new store
    for the copy. A store keeps the mode it was made in (ADR-0050), even an empty one:
    another process may have opened it in that mode already."""
    made_in = (
        f"a new, empty store, or one `init` made with $WORKCENTER_CIPHER_KEY set to {key_named}"
    )
    shown = public_url(target)  # without a password
    if new_key is None:
        return InvalidInput(
            f"the new store at {shown} is encrypted, and a store keeps the mode it was made"
            f" in: name a path or schema that holds no store yet, to copy without encryption"
        )
    try:
        with _key(None), WorkCenter.open(target, create=False, inline_projections=False) as plain:
            count = event_log.events_held(plain.store)
    except StoreKeyRefused:
        return InvalidInput(
            f"the new store at {shown} is encrypted under another key: name {made_in}"
        )
    if count:
        return InvalidInput(
            f"the new store at {shown} is not empty: it holds {count} events, without"
            f" encryption; name {made_in}"
        )
    return InvalidInput(
        f"the new store at {shown} holds no events but was made without encryption (by"
        " `workcenter init`?), and a store keeps the mode it was made in: remove it, or"
        f" name {made_in}"
    )


def _same_store(source: str, target: str) -> bool:
    """Whether both name one store: the same URL, or the same file however it is written."""
    if is_postgres_url(source) or is_postgres_url(target):
        return source == target
    if is_in_memory(source) or is_in_memory(target):
        return False  # each opening of one is a store of its own
    try:
        return os.path.samefile(source, target)
    except OSError:  # one does not exist yet (or cannot be reached): not the same file
        return os.path.abspath(source) == os.path.abspath(target)
    except ValueError:  # a NUL byte: refused when the store is opened
        return False


def _copy(
    old: WorkCenter,
    new: WorkCenter,
    head: int,
    progress: Callable[[int, int], None] | None,
    as_stored: bool,
) -> int:
    """Every event up to position ``head`` (inclusive), in order. As stored, the chain's
    links (over the stored bytes) are the source's: sealed again, an encrypted event's
    bytes differ by their nonce, and an anchor kept from the source called the copy
    changed (found by acceptance testing)."""
    source, target = old.store, new.store
    position = copied = 0
    while position < head and (
        page := source.recorder.select_notifications(
            start=position, limit=PAGE, stop=head, inclusive_of_start=False
        )
    ):
        if as_stored:
            rows = [
                StoredEvent(n.originator_id, n.originator_version, n.topic, n.state) for n in page
            ]
        else:
            events = [source.mapper.to_domain_event(n) for n in page]
            rows = [target.mapper.to_stored_event(e) for e in events]
        # At the source's positions: PostgreSQL's have gaps (ids a rolled-back insert or a
        # crash burnt), and each link names its position (ADR-0133).
        cast(PositionedInserts, target.recorder).insert_at([n.id for n in page], rows)
        position = page[-1].id
        copied += len(page)
        if progress is not None:
            progress(position, head)
    return copied
