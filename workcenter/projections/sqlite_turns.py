"""The turns of claims with one client claim id in every process of a SQLite store
(ADR-0123; ADR-0118 gives them on PostgreSQL).

A byte of a file beside the store's (``<store>-turns``), chosen by the id, is locked
for the claim (a POSIX record lock, waited for): another process claiming with an id
of that byte waits until this claim has saved, and then finds its Run. The operating
system releases a dead process's locks. POSIX record locks belong to a process, not a
thread, and closing any descriptor of the file releases all of them, so each process
opens the file once and keeps it, and its threads first take a lock of their own for
the byte. The file is made with the store file's permissions; where it cannot be
opened, claims take turns within the process only, and the log says so once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

# Bytes, so turns: ids that share one wait for each other, which costs only a wait.
TURNS = 64
SUFFIX = "-turns"
log = logging.getLogger("workcenter.store")


class _TurnFile:
    def __init__(self, store: str) -> None:
        # Never closed: a close would release every lock this process holds on it.
        self.fd = _open(store)
        self.threads = tuple(threading.Lock() for _ in range(TURNS))
        self.unlockable = False  # said once on the log


def _open(store: str) -> int | None:
    """The turns file's descriptor, made with the store file's permissions (every user
    who may write the store may take turns), or None when it cannot be opened: claims
    then take turns within this process only, said once on the log, rather than fail
    (found by acceptance testing: a file another user made was a 500)."""
    path = store + SUFFIX
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.fchmod(fd, os.stat(store).st_mode & 0o666)
        except FileExistsError:
            fd = os.open(path, os.O_RDWR)
    except OSError as error:
        log.warning(
            "claims with one client claim id take turns within this process only: %s (%s)",
            path,
            error.strerror or error,
        )
        return None
    return fd


_files: dict[str, _TurnFile] = {}
_opening = threading.Lock()


@contextmanager
def turn(store_path: str, client_claim_id: str) -> Iterator[None]:
    """Held while a claim with ``client_claim_id`` looks the id up and claims, in every
    process of the store file at ``store_path``."""
    place = os.path.realpath(store_path)
    with _opening:
        opened = _files.get(place)
        if opened is None:
            opened = _files[place] = _TurnFile(place)
    byte = zlib.crc32(client_claim_id.encode()) % TURNS
    with opened.threads[byte]:
        fd = opened.fd
        if fd is None or not _locked(opened, fd, byte):
            yield
            return
        try:
            yield
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, byte)


def _locked(opened: _TurnFile, fd: int, byte: int) -> bool:
    """Whether ``byte`` of the turns file is now this process's: a file system that takes
    no locks leaves claims taking turns within the process, said once, as a file that
    cannot be opened does."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, byte)
    except OSError as error:
        if not opened.unlockable:
            opened.unlockable = True
            log.warning(
                "claims with one client claim id take turns within this process only: its"
                " turns file takes no lock (%s)",
                error.strerror or error,
            )
        return False
    return True
