"""Recurrences written in code, for families whose iteration adds injections or norms around a shared stack.

Each module ``_recurrence_<family>.py`` registers its builders with `register_recurrence` when imported here.
"""
from __future__ import annotations

import importlib
import pkgutil

from . import __path__ as _package_path

for _info in pkgutil.iter_modules(_package_path):
    if _info.name.startswith("_recurrence_"):
        importlib.import_module(f"{__package__}.{_info.name}")
