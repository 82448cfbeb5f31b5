"""Published checkpoints: load by short name offline, prepare a folder for the Hub, push it.

The checkpoints ship inside the package (``hub_configs/<name>/``), so ``load_pretrained("itrsa-sudoku")`` needs no
network. A prepared folder carries the model's own code and an ``auto_map``, so Hub users without jacobiscope can load
it with ``trust_remote_code=True`` (jacobiscope itself never executes remote code unless asked).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ._io import atomic_write_text
from ._resources import shipped_folder
from .errors import JacobiscopeError

__all__ = ["load_pretrained", "resolve_checkpoint", "shipped_checkpoints", "prepare_for_hub", "push_to_hub", "HubError"]

_CODE = {
    "itrsa_sudoku": ("itrsa", "configuration_itrsa", "ItrSAConfig", "modeling_itrsa", "ItrSAForSudoku"),
    "akorn_sudoku": ("akorn", "configuration_akorn", "AKOrNConfig", "modeling_akorn", "AKOrNForSudoku"),
}


class HubError(JacobiscopeError, ValueError):
    """A checkpoint name, folder or file is unusable."""


def shipped_checkpoints() -> dict[str, Path]:
    """Short name -> folder of every checkpoint shipped with jacobiscope (folders holding a config.json)."""
    root = shipped_folder("hub_configs")
    return {path.name: path for path in sorted(root.iterdir()) if (path / "config.json").is_file()}


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
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise HubError(f"{folder} has no model.safetensors: jacobiscope loads weights only from safetensors.")
        try:
            from safetensors import safe_open

            with safe_open(str(weights), framework="pt") as handle:
                handle.keys()
        except Exception as error:  # noqa: BLE001 - any parse failure is a corrupt file
            raise HubError(f"{weights} is corrupt or truncated ({type(error).__name__}: {error}). Re-download or re-save it.") from error
    elif name_or_path not in shipped_checkpoints() and "/" not in str(name_or_path):
        names = ", ".join(shipped_checkpoints()) or "none"
        raise HubError(f"Unknown checkpoint {name_or_path!r}: not a folder, not a shipped name ({names}), not a Hub repo id.")
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
