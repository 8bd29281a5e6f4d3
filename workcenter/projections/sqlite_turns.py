"""The turns of claims with one client claim id in every process of a SQLite store
(ADR-0123; ADR-0118 gives them on PostgreSQL).

A byte of a file beside the store's (``<store>-turns``), chosen by the id, is locked
for the claim (a POSIX record lock, waited for): another process claiming with an id
of that byte waits until this claim has saved, and then finds its Run. The operating
system releases a dead process's locks. POSIX record locks belong to a process, not a
thread, and closing any descriptor of the file releases all of them, so each process
opens the file once and keeps it, and its threads first take a lock of their own for
the byte.
"""

from __future__ import annotations

import fcntl
import os
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

# Bytes, so turns: ids that share one wait for each other, which costs only a wait.
TURNS = 64
SUFFIX = "-turns"


class _TurnFile:
    def __init__(self, path: str) -> None:
        # Never closed: a close would release every lock this process holds on it.
        self.fd = os.open(path + SUFFIX, os.O_RDWR | os.O_CREAT, 0o600)
        self.threads = tuple(threading.Lock() for _ in range(TURNS))


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
        fcntl.lockf(opened.fd, fcntl.LOCK_EX, 1, byte)
        try:
            yield
        finally:
            fcntl.lockf(opened.fd, fcntl.LOCK_UN, 1, byte)
