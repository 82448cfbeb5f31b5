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

The lock is the operating system's (``flock`` on the file ``.jacobiscope.lock`` in the folder), so it ends with
its process however that process ends — SIGKILL and a machine that stops included — and no stale lock file has to
be recognised or broken. The file stays in the folder and names the last holder (process id, host), which the error
quotes. Where ``flock`` does not exist (Windows) the lock does nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from .errors import FolderBusyError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["folder_lock", "FolderBusyError", "LOCK_NAME"]

LOCK_NAME = ".jacobiscope.lock"


def _holder_of(descriptor: int) -> dict:
    os.lseek(descriptor, 0, os.SEEK_SET)
    try:
        holder = json.loads(os.read(descriptor, 4096).decode() or "{}")
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


@contextlib.contextmanager
def folder_lock(folder, what: str = "written", name: str = LOCK_NAME):
    """Hold ``folder``'s lock for the ``with`` block (the folder is created); raise `FolderBusyError` at once if
    another process holds it. ``what`` completes the message ("... is being trained by process 123 on host");
    ``name`` is the lock file's, for a second, independent lock on the same folder.

    The lock is per open file: the same process taking it twice (two ``with`` blocks) is refused as well, which is
    what a second writer in one process needs too.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder_of(descriptor)
                pid, host = holder.get("pid"), str(holder.get("host", "?"))
                pid = pid if isinstance(pid, int) else -1  # a file another program wrote: still refuse, say so
                raise FolderBusyError(
                    f"{folder} is being {what} by process {pid} on {host}: two processes writing one folder would "
                    f"corrupt it — wait for that process to finish, or use another folder", pid, host) from None
        os.ftruncate(descriptor, 0)
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        yield path
    finally:
        os.close(descriptor)  # closing the descriptor releases the flock
