"""One writer per folder: a lock that a second process sees and that a killed process cannot leave behind.

Example::

    >>> import pathlib, tempfile
    >>> from jacobiscope._locks import folder_lock, FolderBusyError
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with folder_lock(folder, "trained"):
    ...         try:
    ...             with folder_lock(folder, "trained"):
    ...                 pass
    ...         except FolderBusyError as error:
    ...             print(type(error).__name__, error.pid > 0)
    FolderBusyError True

The lock is `filelock.FileLock` on the file ``.jacobiscope.lock`` in the folder: the operating system's lock
(``flock`` on Unix, ``LockFileEx`` on Windows), so it ends with its process however that process ends — SIGKILL and
a machine that stops included — and no stale lock file has to be recognised or broken. The file stays in the folder
and names the last holder (process id, host), which the error quotes.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from pathlib import Path

import filelock

from .errors import FolderBusyError

__all__ = ["folder_lock", "FolderBusyError", "LOCK_NAME"]

logger = logging.getLogger(__name__)

LOCK_NAME = ".jacobiscope.lock"


def _write_holder(descriptor: int) -> None:
    """Name this process in the lock file, through the lock's own descriptor (Windows refuses a second handle)."""
    os.ftruncate(descriptor, 0)
    os.lseek(descriptor, 0, os.SEEK_SET)
    os.write(descriptor, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())


def _holder_of(path: Path) -> dict:
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):  # Windows: the holder's locked byte cannot be read; a file another program wrote
        return {}
    return holder if isinstance(holder, dict) else {}


def _file_lock(path: Path) -> filelock.BaseFileLock:
    """A non-blocking lock that writes its holder into the file and keeps the file on release."""
    try:
        return filelock.FileLock(path, timeout=0, preserve_lock_file=True, on_acquired=_write_holder)
    except TypeError:  # pragma: no cover - a filelock without on_acquired (< 4): the holder is written after
        return filelock.FileLock(path, timeout=0)


@contextlib.contextmanager
def folder_lock(folder, what: str = "written", name: str = LOCK_NAME):
    """Hold ``folder``'s lock for the ``with`` block (the folder is created); raise `FolderBusyError` at once if
    another process holds it. ``what`` completes the message ("... is being trained by process 123 on host");
    ``name`` is the lock file's, for a second, independent lock on the same folder.

    Each call takes its own lock (a new `filelock.FileLock`, not a shared reentrant one): the same process taking it
    twice (two ``with`` blocks) is refused as well, which is what a second writer in one process needs too.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    lock = _file_lock(path)
    try:
        lock.acquire()
    except filelock.Timeout:
        holder = _holder_of(path)
        pid, host = holder.get("pid"), str(holder.get("host", "?"))
        pid = pid if isinstance(pid, int) else -1  # a file another program wrote: still refuse, say so
        raise FolderBusyError(
            f"{folder} is being {what} by process {pid} on {host}: two processes writing one folder would "
            f"corrupt it — wait for that process to finish, or use another folder", pid, host) from None
    try:
        if not _holder_of(path):  # pragma: no cover - the filelock < 4 path (no on_acquired)
            path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
        logger.debug("locked %s (%s)", path, what)
        yield path
    finally:
        lock.release()
