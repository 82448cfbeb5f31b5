"""Where the shipped data folders (`adapters/`, `hub_configs/`) are, installed or in a source checkout."""
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_folder(name: str) -> Path:
    """Return the folder ``name`` ("adapters" or "hub_configs") as installed with the wheel.

    A wheel carries it as ``jacobiscope/_shipped/<name>``; an editable install or a source checkout has it
    beside the package. Raises ``FileNotFoundError`` naming both places when neither exists.
    """
    candidates = [_PACKAGE_DIR / "_shipped" / name, _PACKAGE_DIR.parent / name]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    from .errors import MissingFileError

    raise MissingFileError(
        f"jacobiscope's '{name}' folder is missing: looked in {', '.join(map(str, candidates))}. "
        "Reinstall jacobiscope: pip install -e . in its clone, or pip install --force-reinstall on the wheel you built."
    )


def public_name(name_or_path) -> str:
    """How a model is named in reports, provenance and listings: never an absolute local path.

    Example::

        >>> from jacobiscope._resources import public_name, shipped_folder
        >>> public_name(shipped_folder("hub_configs") / "itrsa-sudoku"), public_name("openai-community/gpt2")
        ('itrsa-sudoku', 'openai-community/gpt2')

    A shipped checkpoint is its short name; a Hugging Face cache snapshot its repo id; a folder under the
    working directory a relative path; a folder inside an installed package the path from ``site-packages``;
    any other local folder its own name. Text that is not an existing local path (a Hub id) is returned as is.
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not text or not path.exists():
        return text
    path = path.resolve()
    parts = path.parts
    for index, part in enumerate(parts):
        # ~/.cache/huggingface/hub/models--owner--name/snapshots/<revision>
        if part.startswith("models--") and index + 1 < len(parts) and parts[index + 1] == "snapshots":
            return part[len("models--"):].replace("--", "/")
    try:
        relative = path.relative_to(shipped_folder("hub_configs")).as_posix()
        return relative if relative != "." else path.name
    except (ValueError, FileNotFoundError):
        pass
    if "site-packages" in parts:
        return "/".join(parts[len(parts) - parts[::-1].index("site-packages"):])
    try:
        relative = path.relative_to(Path.cwd().resolve()).as_posix()
        return relative if relative != "." else path.name
    except ValueError:
        return path.name
