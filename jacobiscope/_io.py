"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half of one.

Example::

    >>> import pathlib, tempfile
    >>> from jacobiscope._io import atomic_write_text
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = atomic_write_text(pathlib.Path(folder) / "runs" / "report.json", '{"rows": []}')
    ...     print(path.name, path.read_text())
    report.json {"rows": []}
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

__all__ = ["atomic_write_text", "atomic_write_bytes"]

# Room left in a file name for the temp prefix/suffix (NAME_MAX is 255 bytes on common file systems).
_MAX_TEMP_STEM = 200


def atomic_write_bytes(path, data) -> Path:
    """Write ``data`` to ``path`` atomically and durably; return the path.

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope._io import atomic_write_bytes
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = atomic_write_bytes(pathlib.Path(folder) / "figure.png", b"\\x89PNG")
        ...     path.read_bytes()
        b'\\x89PNG'

    The bytes go to a temp file in the same directory (so the final rename never crosses file systems), which
    is flushed and fsynced, then renamed over ``path`` with `os.replace`. On any failure, including
    KeyboardInterrupt, the temp file is removed and an existing ``path`` is left untouched. Missing parent
    directories are created. A file that already existed keeps its permission bits; a new one gets the
    usual ``0o666 & ~umask``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        hint = " (use atomic_write_text for str)" if isinstance(data, str) else ""
        raise TypeError(f"atomic_write_bytes expected bytes, got {type(data).__name__}{hint}")
    path = Path(os.fspath(path))
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    fd, temp = _create_temp(parent, path.name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(parent)
    return path


def atomic_write_text(path, text: str, encoding: str = "utf-8", errors: str = "strict") -> Path:
    """Write ``text`` to ``path`` atomically (see `atomic_write_bytes`); return the path.

    Example::

        >>> import pathlib, tempfile
        >>> from jacobiscope._io import atomic_write_text
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = atomic_write_text(pathlib.Path(folder) / "notes.txt", "line 1\\nline 2\\n")
        ...     path.read_text().splitlines()
        ['line 1', 'line 2']

    The text is encoded with ``encoding`` / ``errors`` and written as-is: newlines are not translated, so the
    file is byte-identical on every platform.
    """
    if not isinstance(text, str):
        hint = " (use atomic_write_bytes for bytes)" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"atomic_write_text expected str, got {type(text).__name__}{hint}")
    return atomic_write_bytes(path, text.encode(encoding, errors))


def _create_temp(parent: Path, name: str) -> tuple[int, str]:
    """A new, exclusively created temp file next to the target: ``.<name>.<random>.tmp``."""
    stem = name[:_MAX_TEMP_STEM]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = os.path.join(parent, f".{stem}.{secrets.token_hex(4)}.tmp")
        try:
            # Mode 0o666 lets the process umask decide, as open(path, "w") would; mkstemp's 0o600 would
            # leave every report readable by its owner only.
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a unique temp file for {name!r} in {str(parent)!r}")


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable. Best effort: some platforms (Windows) cannot open a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
