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

import errno
import logging
import os
import secrets
import stat
from pathlib import Path

# The errors are defined in jacobiscope.errors (every public exception lives there) and importable from here too.
from .errors import (ArgumentTypeError, 
    MissingFileError, NoPermissionError, NotAFileError, NotAFolderError, NotARegularFileError, OutputInsideInputError,
    PathError,
)

__all__ = ["atomic_write_text", "atomic_write_bytes", "check_file_path", "refuse_output_inside_inputs",
           "path_relation", "PathError", "NotAFileError", "MissingFileError", "NoPermissionError", "NotAFolderError",
           "NotARegularFileError", "OutputInsideInputError"]

logger = logging.getLogger(__name__)

# Room left in a file name for the temp prefix/suffix (NAME_MAX is 255 bytes on common file systems).
_MAX_TEMP_STEM = 200
_NAME_MAX = 255


_KINDS = {errno.EISDIR: NotAFileError, errno.ENOENT: MissingFileError, errno.EACCES: NoPermissionError,
          errno.EPERM: NoPermissionError, errno.ENOTDIR: NotAFolderError, errno.EEXIST: NotAFolderError}


def path_error(code: int | None, message: str) -> PathError:
    """A `PathError` (of the built-in kind matching ``code``) with ``message`` as its whole text."""
    error = _KINDS.get(code, PathError)(message)
    error.errno = code
    error.strerror = os.strerror(code) if code else None
    return error


def _as_path(path, what: str) -> Path:
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"{what} expected a file path (str or os.PathLike), got {type(path).__name__} — pass e.g. "
                        "'report.json' or pathlib.Path('runs/report.json')")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{what} expected a str path, got {type(text).__name__} — pass a str or pathlib.Path")
    if not text.strip():
        example = "report.html" if "html" in what.lower() else "report.json"
        raise path_error(errno.ENOENT, f"{what} got an empty file path {text!r} — pass a file name such as "
                                       f"{example!r}")
    if "\0" in text:
        raise path_error(errno.EINVAL, f"{what}: the path {text!r} contains a NUL character — pass a plain file path")
    return Path(text).expanduser()


def check_file_path(path, what: str = "the output file") -> Path:
    """Check, before any work is done, that ``path`` can become a file: not a folder, no file where a folder must
    be, a file name the file system takes, a folder that can be written. Missing folders are fine (they are
    created). Returns the path; raises `PathError` (or TypeError for a non-path) with the fix.

    Example::

        >>> import tempfile
        >>> from jacobiscope._io import check_file_path
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     check_file_path(folder, "Report.to_json")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.NotAFileError: Report.to_json: '...' is a folder, not a file — pass a file path inside it, e.g. '.../report'
    """
    target = _as_path(path, what)
    shown = os.fspath(path)
    try:
        return _check_target(target, shown, what)
    except PathError:
        raise
    except OSError as error:  # e.g. a folder name too long: the checks themselves cannot stat the path
        raise path_error(error.errno, f"{what}: cannot use {shown!r} ({error.strerror or error}) — check the "
                                      "path") from None


def _check_target(target: Path, shown: str, what: str) -> Path:
    if len(os.fsencode(target.name)) > _NAME_MAX:
        raise path_error(errno.ENAMETOOLONG, f"{what}: the file name {target.name[:40]!r}... is "
                                             f"{len(target.name)} characters, too long for the file system — "
                                             "use a name under 200 characters")
    if target.is_dir():
        raise path_error(errno.EISDIR, f"{what}: {shown!r} is a folder, not a file — pass a file path inside it, "
                                       f"e.g. {str(target / 'report')!r}")
    _check_kind(target, shown, what)
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise path_error(errno.ENOTDIR, f"{what}: cannot write {shown!r}: {str(ancestor)!r} is a file, not a "
                                        "folder — choose a path whose folders are folders")
    effective = {"effective_ids": True} if os.access in os.supports_effective_ids else {}
    if ancestor.is_dir() and not os.access(ancestor, os.W_OK | os.X_OK, **effective):
        raise path_error(errno.EACCES, f"{what}: cannot write {shown!r}: no permission to write in "
                                       f"{str(ancestor)!r} — choose a folder you can write to")
    return target


def _check_kind(target: Path, shown: str, what: str) -> None:
    """Refuse what is not a regular file (nor missing, nor a character device): a FIFO (a write blocks until a
    reader comes: a hang), a socket (cannot be opened), a block device (a report would overwrite a disk), a symlink
    loop. Symlinks are followed: the link stays, its target gets the bytes."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return  # a new file (or a dangling link: its target is created)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise path_error(errno.ELOOP, f"{what}: {shown!r} is a symbolic link that loops back on itself — "
                                          "remove the link or pass another file path") from None
        return  # a file where a folder must be, a name too long: the checks that follow name it
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a FIFO (named pipe): writing would block until a reader opens it" if stat.S_ISFIFO(mode) else
            "a socket, which cannot be written as a file" if stat.S_ISSOCK(mode) else
            "a block device: writing would overwrite the disk" if stat.S_ISBLK(mode) else "not a regular file")
    link = f" (a link to {os.path.realpath(target)!r})" if target.is_symlink() else ""
    raise _special(shown, link, kind, what)


def _special(shown: str, link: str, kind: str, what: str) -> PathError:
    error = NotARegularFileError(f"{what}: {shown!r}{link} is {kind} — nothing was written; pass the path of a "
                                 "regular file, e.g. 'report.json'")
    error.errno = errno.EINVAL
    error.strerror = os.strerror(errno.EINVAL)
    return error


def path_relation(path, other) -> str | None:
    """How ``path`` stands to ``other`` once both are resolved (``~``, relative parts, symlinks; hard links are the
    same file): ``"same"``, ``"inside"`` (``path`` lies inside the folder ``other``), ``"holds"`` (``other`` lies
    inside ``path``) or None.

    Example::

        >>> from jacobiscope._io import path_relation
        >>> path_relation("runs/a/report.json", "runs/a"), path_relation("runs", "runs/a/x.csv"), path_relation("a", "b")
        ('inside', 'holds', None)
    """
    first = Path(os.fspath(path)).expanduser()
    second = Path(os.fspath(other)).expanduser()
    try:
        if first.exists() and second.exists() and os.path.samefile(first, second):
            return "same"
    except OSError:
        pass
    try:
        first, second = first.resolve(), second.resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare the paths as written
        first, second = Path(os.path.abspath(first)), Path(os.path.abspath(second))
    if first == second:
        return "same"
    if second in first.parents:
        return "inside"
    if first in second.parents:
        return "holds"
    return None


def refuse_output_inside_inputs(outputs: dict, inputs: dict, *, replaced=()) -> None:
    """Refuse, before anything runs, an output that is, or lies inside, an input of the same command.

    Example::

        >>> from jacobiscope._io import refuse_output_inside_inputs
        >>> refuse_output_inside_inputs({"--json": "model/eval.json"}, {"the model folder": "model"})
        Traceback (most recent call last):
        ...
        jacobiscope.errors.OutputInsideInputError: --json 'model/eval.json' lies inside the model folder 'model', an input of this command: writing it would change what the command reads — write it outside the inputs, e.g. --json eval.json

    Arguments:
        outputs: ``{label: path}`` of what the command writes (label as the user knows it, e.g. ``"--json"``);
            None values are skipped.
        inputs: ``{description: path}`` of what it reads (``"the model folder"``, ``"the split 'a.csv'"``).
        replaced: labels of folder outputs that are replaced as a whole: for them an input lying inside the output
            is refused as well (replacing the folder would delete that input).

    Paths are compared resolved (``~``, ``..``, relative to the working directory, symlinks followed, hard links
    recognized), so no spelling of the same place slips through. Raises `OutputInsideInputError` (a `PathError`
    and a ValueError) naming both paths and the fix.
    """
    for label, output in outputs.items():
        if output is None:
            continue
        for what, source in inputs.items():
            if source is None:
                continue
            relation = path_relation(output, source)
            if relation == "holds" and label not in replaced:
                relation = None
            if relation is None:
                continue
            shown, name = str(output), Path(os.fspath(output)).name or "output"
            verb = {"same": "is", "inside": "lies inside", "holds": "holds"}[relation]
            damage = ("replacing it would delete that input" if relation == "holds"
                      else "writing it would change what the command reads")
            error = OutputInsideInputError(f"{label} {shown!r} {verb} {what} {str(source)!r}, an input of this "
                                           f"command: {damage} — write it outside the inputs, e.g. {label} {name}"
                                           if relation != "holds" else
                                           f"{label} {shown!r} {verb} {what} {str(source)!r}, an input of this "
                                           f"command: {damage} — choose a new folder, e.g. {label} {name}-out")
            error.errno = errno.EINVAL
            error.strerror = os.strerror(errno.EINVAL)
            raise error


def _write_failure(error: OSError, path, what: str) -> PathError:
    """The `PathError` for an OSError met while writing ``path``."""
    shown = os.fspath(path)
    code = error.errno
    reason = error.strerror or str(error)
    if code in (errno.EACCES, errno.EPERM):
        fix = "choose a folder you can write to"
        reason = f"no permission to write in {str(Path(shown).parent) or '.'!r}"
    elif code == errno.EROFS:
        fix = "the file system is read-only: choose a folder on a writable disk"
    elif code == errno.ENOSPC and _is_device(shown):
        reason = "the device is full (no space left)"
        fix = "the disk or device is full: pass the path of a regular file on a disk with free space"
    elif code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG):
        fix = "free some disk space (or raise the file size limit) and write it again; the old file, if any, is intact"
    elif code == errno.ENAMETOOLONG:
        fix = "use a shorter file name"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        fix = "a file is in the way of a folder on that path: choose another path"
    else:
        fix = "check the path; nothing was written"
    return path_error(code, f"{what}: cannot write {shown!r} ({reason}) — {fix}")


def atomic_write_bytes(path, data, *, what: str = "atomic_write_bytes") -> Path:
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

    Only regular files are replaced. A symlink is written through: the link stays a link and its target gets the
    new bytes (atomically, the temp file beside the target). A character device (``/dev/null``, a terminal) is
    written in place, never replaced by a file; a full one (``/dev/full``) raises the disk-full `PathError`. A
    FIFO, a socket, a block device or a symlink loop is refused with `NotARegularFileError` before anything is
    written.

    A path that cannot be written (a folder, a file where a folder must be, no permission, a read-only or full
    disk, a name too long) raises `PathError` naming the path, the reason and the fix; ``what`` names the caller
    in that message (e.g. ``"Report.to_json"``).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        hint = " (use atomic_write_text for str)" if isinstance(data, str) else ""
        raise ArgumentTypeError(f"atomic_write_bytes expected bytes, got {type(data).__name__}{hint}")
    given = path
    path = check_file_path(path, what)
    # A symlink is written through: the link stays, its target gets the new bytes (atomically, beside the target).
    if path.is_symlink():
        path = Path(os.path.realpath(path))
        check_file_path(path, what)
    if _is_device(path):
        return _write_device(path, bytes(data), given, what)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = None
        fd, temp = _create_temp(parent, path.name)
    except OSError as error:
        raise _write_failure(error, given, what) from error
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        _check_kind(path, os.fspath(given), what)  # a FIFO made while we wrote is still never replaced
        os.replace(temp, path)
    except BaseException as error:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        if isinstance(error, OSError) and not isinstance(error, PathError):
            raise _write_failure(error, given, what) from error
        raise
    _fsync_directory(parent)
    logger.debug("wrote %s atomically (%d bytes)", path, len(data))
    return Path(os.fspath(given)).expanduser()


def _is_device(path) -> bool:
    """A character device (``/dev/null``, ``/dev/full``, a terminal): written in place, never replaced by a file."""
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _write_device(path: Path, data: bytes, given, what: str) -> Path:
    """Write into a character device as it is (no temp file, no rename: the node itself is never replaced); a full
    device (``/dev/full``) raises the disk-full `PathError`."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise _write_failure(error, given, what) from error
    try:
        with os.fdopen(fd, "wb", buffering=0) as handle:
            view = memoryview(data)
            while view:
                written = handle.write(view)
                if not written:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
    except BlockingIOError as error:
        raise _write_failure(OSError(errno.EAGAIN, "the device would block"), given, what) from error
    except OSError as error:
        raise _write_failure(error, given, what) from error
    return Path(os.fspath(given)).expanduser()


def atomic_write_text(path, text: str, encoding: str = "utf-8", errors: str = "strict", *,
                      what: str = "atomic_write_text") -> Path:
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
        raise ArgumentTypeError(f"atomic_write_text expected str, got {type(text).__name__}{hint}")
    return atomic_write_bytes(path, text.encode(encoding, errors), what=what)


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
