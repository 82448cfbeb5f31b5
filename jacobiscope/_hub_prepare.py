"""Prepare a checkpoint folder for the Hub: the model's code is written next to the weights, from the installed
package, with an ``auto_map`` in config.json, so a Hub user can load it with ``trust_remote_code=True``.

Example::

    >>> from jacobiscope._hub_prepare import model_code
    >>> sorted(model_code("itrsa_sudoku"))
    ['configuration_itrsa.py', 'modeling_itrsa.py']

The shipped checkpoints (``hub_configs/``) carry no code: it would be a copy of the package's, free to drift.
`jacobiscope.hub.prepare_for_hub` is the public entry; this module holds its parts.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ._hub_files import HubError, _read_json, _shown
from ._io import atomic_write_bytes, atomic_write_text

#: model_type -> (folder under jacobiscope/models, config module, config class, model module, model class)
MODEL_CODE = {
    "itrsa_sudoku": ("itrsa", "configuration_itrsa", "ItrSAConfig", "modeling_itrsa", "ItrSAForSudoku"),
    "akorn_sudoku": ("akorn", "configuration_akorn", "AKOrNConfig", "modeling_akorn", "AKOrNForSudoku"),
}
#: The file `prepare_for_hub` writes into each folder it prepares: only a folder holding it is ever replaced.
PREPARED_MARKER = ".jacobiscope-prepared.json"
_MODELS_DIR = Path(__file__).resolve().parent / "models"


def model_code(model_type: str) -> dict[str, bytes]:
    """The Python files a prepared folder of ``model_type`` carries: file name -> the package's bytes (each model
    file loads alone, so these two files are the whole model for a Hub user)."""
    package, config_module, _, model_module, _ = MODEL_CODE[model_type]
    return {f"{module}.py": (_MODELS_DIR / package / f"{module}.py").read_bytes()
            for module in (config_module, model_module)}


def auto_map(model_type: str) -> dict[str, str]:
    """The ``auto_map`` of a prepared config.json: which class of which file ``AutoConfig`` / ``AutoModel`` load."""
    _, config_module, config_class, model_module, model_class = MODEL_CODE[model_type]
    return {"AutoConfig": f"{config_module}.{config_class}", "AutoModel": f"{model_module}.{model_class}"}


def prepared_config(source: Path) -> tuple[str, str]:
    """``(model_type, config.json text with auto_map)`` for the checkpoint folder ``source``; raises `HubError`
    when it is not a reference-model checkpoint."""
    if not (source / "config.json").is_file():
        raise HubError(f"{_shown(source)!r} is not a checkpoint folder (no config.json) — pass a shipped name or a "
                       "folder saved with save_pretrained")
    config = _read_json(source / "config.json", "re-save the model with save_pretrained")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in MODEL_CODE:
        raise HubError(f"prepare_for_hub knows only the reference models ({', '.join(sorted(MODEL_CODE))}), not "
                       f"model_type {model_type!r} — pass itrsa-sudoku, akorn-sudoku or a folder trained with "
                       "'jacobiscope sudoku train'")
    config["auto_map"] = auto_map(model_type)
    return model_type, json.dumps(config, indent=2, sort_keys=True) + "\n"


def destination_folder(source: Path, destination) -> Path:
    """The folder to write: ``destination`` checked for type and emptiness, or ``source`` itself when None."""
    if destination is None:
        return source
    if isinstance(destination, bytes) or not isinstance(destination, (str, os.PathLike)):
        raise HubError(f"prepare_for_hub expected a destination folder path (str or Path), got "
                       f"{type(destination).__name__} — pass e.g. 'prepared/model'")
    if not str(os.fspath(destination)).strip():
        raise HubError("prepare_for_hub got an empty destination — pass the folder to write, e.g. 'prepared/model'")
    return Path(os.fspath(destination)).expanduser()


def prepare_in_place(folder: Path, model_type: str, config_text: str) -> Path:
    """Write the code and config.json into the user's own folder; no marker, so it never becomes replaceable."""
    for name, code in model_code(model_type).items():
        atomic_write_bytes(folder / name, code, what="prepare_for_hub")
    atomic_write_text(folder / "config.json", config_text, what="prepare_for_hub")
    return folder


def prepare_copy(source: Path, folder: Path, model_type: str, config_text: str) -> Path:
    """Build the prepared copy in a staging folder beside ``folder`` and swap it in whole: a failure (a full disk,
    Ctrl-C) leaves the old prepared copy, never half of one."""
    check_destination(source, folder)
    staging = folder.parent / f".{folder.name[:200]}.{os.getpid()}.staging"
    try:
        if staging.exists():
            shutil.rmtree(staging)
        # the source's own code files (an earlier in-place preparation) are replaced by the package's below
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(PREPARED_MARKER))
        for name, code in model_code(model_type).items():
            (staging / name).write_bytes(code)
        atomic_write_text(staging / "config.json", config_text, what="prepare_for_hub")
        atomic_write_text(staging / PREPARED_MARKER, json.dumps({"prepared_by": "jacobiscope.hub.prepare_for_hub",
                                                                 "source": _shown(source)}) + "\n",
                          what="prepare_for_hub")
        _swap_in(staging, folder)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise HubError(f"could not write {str(folder)!r} ({error.strerror or error}) — choose a folder you can "
                           "write to, with free space and a shorter name") from None
        raise
    return folder


def _swap_in(staging: Path, folder: Path) -> None:
    old = None
    if folder.exists():
        old = folder.parent / f".{folder.name[:200]}.{os.getpid()}.old"
        os.replace(folder, old)
    os.replace(staging, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def check_destination(source: Path, folder: Path) -> None:
    """Refuse a destination whose replacement would delete something that is not an earlier prepared copy."""
    from ._io import path_relation

    shown = str(folder)
    try:
        len_ok = all(len(os.fsencode(part)) <= 255 for part in folder.parts)
        relation = path_relation(folder, source)
        # anything that exists and is not a folder (a file, a link, a FIFO, a socket) is never replaced
        is_file = folder.is_symlink() or (folder.exists() and not folder.is_dir())
        is_dir = folder.is_dir()
    except OSError as error:  # e.g. a name too long for the file system
        raise HubError(f"the destination {shown[:80]!r} cannot be used ({error.strerror or error}) — give a shorter "
                       "folder path") from None
    if not len_ok:
        raise HubError(f"the destination {shown[:80]!r}... has a folder name over 255 bytes, too long for the file "
                       "system — give a shorter folder name")
    if relation in ("same", "holds"):
        raise HubError(f"the destination {shown!r} holds the checkpoint {_shown(source)!r}; replacing it would delete "
                       "the source — choose a new folder")
    if relation == "inside":
        raise HubError(f"the destination {shown!r} lies inside the checkpoint folder {_shown(source)!r} — choose a "
                       "folder outside it")
    if is_file:
        raise HubError(f"the destination {shown!r} is a file — give a folder path (it is created)")
    if is_dir and any(folder.iterdir()) and not (folder / PREPARED_MARKER).is_file():
        what = ("a model folder (config.json) that prepare_for_hub did not prepare" if (folder / "config.json").exists()
                else "not a prepared checkpoint")
        raise HubError(f"the destination {shown!r} exists and is {what} (no {PREPARED_MARKER}), so it is not replaced "
                       "— choose a new or empty folder")
    ancestor = folder.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise HubError(f"the destination {shown!r} cannot be created: {str(ancestor)!r} is a file — give a folder "
                       "path")
