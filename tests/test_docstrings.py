"""Every docstring example runs and prints what it says (the docs cannot drift from the code)."""
import doctest
import importlib
import pkgutil

import pytest

import jacobiscope

MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(jacobiscope.__path__, prefix="jacobiscope.")
    if not name.endswith("__main__")
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
