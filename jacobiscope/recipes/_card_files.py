"""The two files of a shipped checkpoint folder that its card's refreshers read: the card and its results.

Example::

    >>> import json, tempfile, pathlib
    >>> from jacobiscope.recipes._card_files import read_shipped_card
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "README.md").write_text("# card\\n"); _ = (folder / "results.json").write_text('{"id": {}}')
    >>> path, card, results = read_shipped_card(folder, "refresh_x")
    >>> path.name, card, results
    ('README.md', '# card\\n', {'id': {}})
"""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_shipped_card"]


def read_shipped_card(folder, caller: str) -> tuple[Path, str, dict]:
    """``(card path, card text, results)`` of the shipped folder ``folder``; a missing file is a FileNotFoundError
    that names it, the caller and what a shipped folder holds."""
    folder = Path(folder)
    card_path, results_path = folder / "README.md", folder / "results.json"
    for path in (card_path, results_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: {caller} needs a shipped folder (model card README.md "
                                    "and results.json, as ship_checkpoint writes them)")
    return card_path, card_path.read_text(), json.loads(results_path.read_text())
