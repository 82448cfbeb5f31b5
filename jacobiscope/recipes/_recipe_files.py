"""Reading a recipe file, for every recipe class: one place that turns a path into a dict of known fields, with
every problem a `RecipeError` (a missing file a `jacobiscope.PathError`) naming the file, the key and the fix.

Example::

    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "recipe.json"
    >>> _ = path.write_text(json.dumps({"loops": 4}))
    >>> read_recipe_file(path, ["loops", "seed"], "MyRecipe", '{"loops": 4}')[1]
    {'loops': 4}
"""
from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from ..errors import RecipeError

__all__ = ["read_recipe_file"]


def read_recipe_file(path, known: list[str], owner: str, example: str) -> tuple[Path, dict]:
    """``(file, fields)`` of a recipe JSON file (UTF-8, a byte-order mark allowed) whose keys are all in ``known``;
    ``owner`` (the recipe class) and ``example`` (a one-line JSON object) go into the errors."""
    import errno

    from .._io import path_error

    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not str(os.fspath(path)).strip():
        raise RecipeError(f"{owner}.from_json expected the path of a recipe JSON file, got {path!r} — pass "
                          "e.g. 'recipe.json'")
    file = Path(path).expanduser()
    if file.is_dir():
        raise path_error(errno.EISDIR, f"recipe {str(path)!r} is a folder, not a recipe file — pass the JSON file "
                                       "(a run folder's recipe is <folder>/recipe.json)")
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise path_error(errno.ENOENT, f"recipe file {str(path)!r} does not exist — check the path") from None
    except OSError as error:
        raise path_error(error.errno, f"recipe file {str(path)!r} cannot be read ({error.strerror or error}) — "
                                      "check the path and its permissions") from None
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is not part of the JSON
    except UnicodeDecodeError as error:
        raise RecipeError(f"recipe file {str(path)!r} is not UTF-8 text (byte {error.start}) — save it as UTF-8 "
                          "JSON") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        where = f"line {error.lineno}, column {error.colno}: {error.msg}" if hasattr(error, "lineno") else str(error)
        raise RecipeError(f"recipe file {str(path)!r} is not valid JSON ({where}) — fix the JSON, e.g. "
                          f"{example}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe file {str(path)!r} holds a JSON {type(data).__name__}, not an object of recipe "
                          f"fields — write e.g. {example}")
    unknown = [key for key in data if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), known, n=1)
            hints.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
        raise RecipeError(f"recipe file {str(path)!r} has unknown key(s) {', '.join(hints)} — fix the key; the "
                          f"fields are those of {owner}: {', '.join(known)}")
    return file, data
