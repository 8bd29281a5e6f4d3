"""A rebuild's shadow file on SQLite, and the ones rebuilds cut short left behind.

A rebuild builds its copy of a view in a directory of its own under the system's
temporary directory (``workcenter-rebuild-XXXX/NAME.sqlite``) and removes it when it
ends. A rebuild killed outright (SIGKILL, a crashed machine) cannot remove it, so the
directory holds a lock file that its rebuild keeps locked (``flock``) from just after
the directory is made until it is removed. The kernel lets go of a process's locks when
it dies, so a directory whose lock can be taken is one no rebuild is using, and the next
rebuild removes it: the reasoning of ADR-0092 for PostgreSQL's shadow schemas, with a
file lock for the advisory lock (ADR-0100).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

PREFIX = "workcenter-rebuild-"
LOCK_NAME = "rebuild.lock"
MAKE_ATTEMPTS = 10


@dataclass(frozen=True)
class ShadowFile:
    path: str
    # The directories of earlier rebuilds, cut short, that making this one removed.
    removed: tuple[str, ...]


@contextmanager
def held(name: str) -> Iterator[ShadowFile]:
    """A new directory for view ``name``'s copy, locked for the ``with`` block, then
    removed; the directories that rebuilds cut short left are removed first."""
    removed = remove_left_behind()
    directory, lock = _make()
    try:
        yield ShadowFile(str(directory / f"{name}.sqlite"), removed)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        os.close(lock)  # lets go of the lock, after the directory is gone


def _make() -> tuple[Path, int]:
    """A new directory, and the descriptor that holds its lock."""
    for _ in range(MAKE_ATTEMPTS):
        directory = Path(tempfile.mkdtemp(prefix=PREFIX))
        lock_path = directory / LOCK_NAME
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            continue  # another rebuild took it for one left behind before the lock existed
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another rebuild is removing it, between our open and our lock
            continue
        # Another rebuild may have taken the lock between our open and our lock, removed
        # the directory and let go: then our lock is on a file no longer there.
        if _same_file(fd, lock_path):
            return directory, fd
        os.close(fd)
    raise OSError(f"could not make a rebuild's directory under {tempfile.gettempdir()}")


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def remove_left_behind() -> tuple[str, ...]:
    """Remove this user's rebuild directories whose lock no rebuild holds.

    A directory without a lock file is kept: one of a rebuild that is making it at this
    moment, or of a Workcenter from before the lock (an operator removes those)."""
    removed = []
    for directory in sorted(Path(tempfile.gettempdir()).glob(PREFIX + "*")):
        try:
            info = directory.lstat()
            if not directory.is_dir() or directory.is_symlink() or info.st_uid != os.geteuid():
                continue
            fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:  # no lock file, gone meanwhile, or not ours to open
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a running rebuild's
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(str(directory))
        finally:
            with suppress(OSError):
                os.close(fd)
    return tuple(removed)
