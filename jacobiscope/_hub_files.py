"""The checks behind `jacobiscope.hub`: a model folder, its config.json and safetensors weights are read and
checked before transformers sees them, each problem raising `HubError` that names the file and the fix.

Example::

    >>> from jacobiscope._hub_files import check_repo_id
    >>> check_repo_id("someone/itrsa-sudoku")
    'someone/itrsa-sudoku'

Public names are re-exported by `jacobiscope.hub`; import them from there.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import HubError  # noqa: F401 - defined with every public exception; raised from here


# A Hub repo id: "name" or "owner/name" (letters, digits, - _ .; no "--" or ".." as the Hub forbids).
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


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
        jacobiscope.errors.HubError: model folder '...' holds only pickle weights (pytorch_model.bin), which can run code when loaded — convert them once with save_pretrained(folder, safe_serialization=True) and pass the converted folder

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
        jacobiscope.errors.HubError: 'my model!' is not a Hub repo id — use owner/name with letters, digits, '-', '_' and '.' (no '--' or '..', at most 96 characters each), e.g. someone/itrsa-sudoku
    """
    text = repo_id if isinstance(repo_id, str) else None
    if text is None or not _REPO_ID.match(text) or "--" in text or ".." in text or text.endswith((".", "-")):
        raise HubError(f"{repo_id!r} is not a Hub repo id — use owner/name with letters, digits, '-', '_' and '.' "
                       "(no '--' or '..', at most 96 characters each), e.g. someone/itrsa-sudoku")
    return text

