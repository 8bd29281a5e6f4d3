"""Confidentiality at rest: the library's AES cipher on everything stored (ADR-0033).

With ``WORKCENTER_CIPHER_KEY`` set (a base64-encoded 16, 24 or 32-byte key, as
the library's ``AESCipher`` takes it), the library builds its cipher from the
environment as it always does (the application is named "WorkCenter", so
``WORKCENTER_CIPHER_KEY`` is its ``CIPHER_KEY``), and the mapper compresses
then encrypts every event and snapshot. The read models keep copies of user
text too, so they seal theirs with the same cipher: the detail view's stored
DTOs, and the titles of the work queue's item list.

A store opened with the wrong key, or with none, must refuse to read rather than
fail somewhere later, and a new store must not take events under two keys
(ADR-0050): the store records its mode at creation, in a one-row table
(``workcenter_cipher``: ``aes`` with a probe sealed by the key, or ``none``),
written by the first process that opens it, before any event. ``check_key``
compares every open with that row and refuses a keyless open of an encrypted
store, another key, or a key for a plain store with ``StoreKeyRefused`` before
anything is written. A store from before the row is judged by decoding its
events, then given the row.
"""

from __future__ import annotations

import binascii
import os
from base64 import b64decode, b64encode
from typing import Any, Final

from eventsourcing.application import Application

from workcenter.adapters import compression
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.domain.errors import InvalidInput
from workcenter.projections import sql
from workcenter.projections.detail import Blobs
from workcenter.projections.work_queue import TITLES_AS_IS, Titles

KEY_ENV: Final = "WORKCENTER_CIPHER_KEY"
KEY_SIZES: Final = (16, 24, 32)
MARKER_TABLE: Final = "workcenter_cipher"
# Sealed with the key in the marker row: only the same key opens it again.
PROBE: Final = b"workcenter: the key of this store"


class StoreKeyRefused(StoreUnavailable):
    """The store's events cannot be read with the cipher key given (or without one)."""

    code = "store_key_refused"


def configured_key(name: str = KEY_ENV) -> str | None:
    """The key from ``$WORKCENTER_CIPHER_KEY`` (or the variable ``name``), checked; None
    when it is not set."""
    key = os.environ.get(name, "").strip()
    if not key:
        return None
    try:
        size = len(b64decode(key, validate=True))
    except (binascii.Error, ValueError):
        size = -1
    if size not in KEY_SIZES:
        raise InvalidInput(
            f"${name} must be a base64-encoded 16, 24 or 32-byte key"
            ' (make one with: python -c "import os, base64;'
            ' print(base64.b64encode(os.urandom(32)).decode())")'
        )
    try:
        import Crypto  # noqa: F401  (the library's AES cipher needs pycryptodome)
    except ImportError:
        raise StoreUnavailable(
            f"${name} is set, but the cipher is not installed: pip install 'workcenter[cipher]'"
        ) from None
    return key


def check_key(store: Application[Any], where: str) -> None:
    """``StoreKeyRefused`` unless the store was created in the mode of ``store``'s mapper
    (with this key, or without a cipher when none is given); a store without the mode's
    row gets one, once its events are shown to decode."""
    datastore = store.factory.datastore  # type: ignore[attr-defined]
    marker = _read_marker(datastore)
    if marker is None:
        _check_events(store, where)
        _write_marker(datastore, store)
        # Another process may have created the store at the same moment: its row won.
        marker = _read_marker(datastore)
        assert marker is not None
    _compare(marker, store, where)


def _compare(marker: tuple[str, bytes | None], store: Application[Any], where: str) -> None:
    mode, probe = marker
    cipher = store.mapper.cipher
    if mode == "none":
        if cipher is not None:
            raise StoreKeyRefused(
                f"the store at {where} is not encrypted: unset ${KEY_ENV}"
                " (or copy it under a key with `workcenter rekey`)"
            )
        return
    if cipher is None:
        raise StoreKeyRefused(f"the store at {where} is encrypted: set ${KEY_ENV} to its key")
    try:
        opened = cipher.decrypt(bytes(probe or b""))
    except Exception:  # a failed GCM tag: another key
        opened = None
    if opened != PROBE:
        raise StoreKeyRefused(f"${KEY_ENV} does not open the store at {where} (another key)")


def _read_marker(datastore: Any) -> tuple[str, bytes | None] | None:
    """The store's (mode, probe), or None when it has no row yet (nothing is written)."""
    with sql.transaction(datastore, commit=False) as c:
        if sql.is_postgres(datastore):
            c.execute("SELECT to_regclass(?) IS NOT NULL", (MARKER_TABLE,))
        else:
            c.execute(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                (MARKER_TABLE,),
            )
        if not c.fetchone()[0]:
            return None
        c.execute(f"SELECT mode, probe FROM {MARKER_TABLE} WHERE id = 1")
        row = c.fetchone()
    return None if row is None else (row[0], row[1])


def _write_marker(datastore: Any, store: Application[Any]) -> None:
    """The row of ``store``'s mode, unless a row is there already (the first one wins)."""
    cipher = store.mapper.cipher
    mode, probe = ("none", None) if cipher is None else ("aes", cipher.encrypt(PROBE))
    with sql.transaction(datastore, commit=True) as c:
        c.execute(
            sql.ddl(
                f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE}"
                " (id INTEGER PRIMARY KEY, mode TEXT NOT NULL, probe BLOB)",
                datastore,
            )
        )
        c.execute(
            f"INSERT INTO {MARKER_TABLE} (id, mode, probe) VALUES (1, ?, ?)"
            " ON CONFLICT (id) DO NOTHING",
            (mode, probe),
        )


def _check_events(store: Application[Any], where: str) -> None:
    """A store from before the mode's row: ``StoreKeyRefused`` unless its events decode
    with the mapper. The first and the last event are tried: a wrong key (or a missing
    one) opens neither, while one event edited behind the store's back fails alone, and
    must not keep ``audit verify`` from opening the store to name it (ADR-0029)."""
    recorder = store.recorder
    last = recorder.max_notification_id() or 0
    if not last:
        return  # nothing stored yet: nothing to read wrongly
    if _decodes(store, None) or _decodes(store, last):
        return
    if store.mapper.cipher is None:
        raise StoreKeyRefused(f"the store at {where} is encrypted: set ${KEY_ENV} to its key")
    raise StoreKeyRefused(
        f"${KEY_ENV} does not open the store at {where}"
        " (another key, or a store that is not encrypted)"
    )


def _decodes(store: Application[Any], position: int | None) -> bool:
    """Whether the event at ``position`` (None: the first) reads and decodes."""
    try:
        [notification] = store.recorder.select_notifications(start=position, limit=1)
        store.mapper.to_domain_event(notification)
    except Exception:  # a failed MAC, bad padding, zlib or JSON garbage, a mangled row
        return False
    return True


def detail_blobs(store: Application[Any]) -> Blobs:
    """The detail view's stored DTOs: deflated, then sealed when the store has a cipher."""
    cipher = store.mapper.cipher
    if cipher is None:
        return Blobs(deflate=compression.deflate, inflate=compression.inflate)
    return Blobs(
        deflate=lambda data: cipher.encrypt(compression.deflate(data)),
        inflate=lambda data: compression.inflate(cipher.decrypt(data)),
    )


def work_item_titles(store: Application[Any]) -> Titles:
    """The work queue's titles: as they are, or sealed (base64 text of the ciphertext)."""
    cipher = store.mapper.cipher
    if cipher is None:
        return TITLES_AS_IS
    return Titles(
        seal=lambda title: b64encode(cipher.encrypt(title.encode())).decode(),
        unseal=lambda sealed: cipher.decrypt(b64decode(sealed)).decode(),
    )
