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
    raise FileNotFoundError(
        f"jacobiscope's '{name}' folder is missing: looked in {', '.join(map(str, candidates))}. "
        "Reinstall jacobiscope (pip install --force-reinstall jacobiscope)."
    )
