"""Every public exception is defined once, in jacobiscope.errors, and every import path it had before gives that same
class (so an ``except`` written against any of them catches what the package raises)."""
import importlib
import pkgutil
import warnings

import pytest

import jacobiscope
import jacobiscope.errors as errors

# Exceptions still defined in a module of their own: errors.py holds an exact, unused copy of each (its STAGED block)
# until the home module imports the class from jacobiscope.errors instead. Empty this once they are switched; the
# test below checks each staged copy against the class the package raises, so the copy cannot drift meanwhile.

# Where each exception could be imported from before it moved: those paths keep working.
OLD_PATHS = {
    "jacobiscope._io": ["PathError", "NotAFileError", "MissingFileError", "NoPermissionError", "NotAFolderError",
                        "NotARegularFileError", "OutputInsideInputError"],
    "jacobiscope._locks": ["FolderBusyError"],
    "jacobiscope.data": ["SudokuError", "UnsolvableSudokuError", "SudokuFileError", "SudokuDataNotFoundError"],
    "jacobiscope.data.sudoku": ["SudokuError", "UnsolvableSudokuError", "SudokuFileError", "SudokuDataNotFoundError"],
    "jacobiscope.data.sudoku._board": ["SudokuError", "UnsolvableSudokuError", "SudokuFileError",
                                       "SudokuDataNotFoundError"],
    "jacobiscope.recipes.sudoku": ["RecipeError"],
    "jacobiscope.cli": ["UsageError"],
    "jacobiscope.cli._parser": ["UsageError"],
    "jacobiscope.adapters": ["AdapterError", "AdapterCheckError", "InputError"],
    "jacobiscope.adapters.check": ["AdapterCheckError"],
    "jacobiscope.adapters.inputs": ["InputError"],
    "jacobiscope.adapters.spec": ["AdapterError"],
    "jacobiscope.hub": ["HubError"],
    "jacobiscope.diagnostics": ["DiagnosticError", "DiagnosticDefinitionError"],
    "jacobiscope.diagnostics._base": ["DiagnosticError", "DiagnosticDefinitionError"],
    "jacobiscope.report": ["ReportFormatError", "ReportSourceError"],
    "jacobiscope.report._json": ["ReportFormatError", "ReportSourceError"],
}


def _is_exception(value) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _root_exceptions() -> dict:
    """name -> class, for every exception class the root namespace or jacobiscope.errors.__all__ names."""
    found = {name: getattr(errors, name) for name in errors.__all__}
    for name in jacobiscope._ORIGIN:
        value = getattr(jacobiscope, name)
        if _is_exception(value):
            found[name] = value
    return found


def _package_exceptions() -> dict:
    """(module, name) -> class, for every exception class in the ``__all__`` of any jacobiscope module."""
    found = {}
    for _, module_name, _ in pkgutil.walk_packages(jacobiscope.__path__, prefix="jacobiscope."):
        if module_name.endswith("__main__"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if _is_exception(value):
                found[(module_name, name)] = value
    return found


def test_every_public_exception_is_defined_in_errors():
    exceptions = _root_exceptions()
    # 25 in errors.__all__ and 4 more the root re-exports from modules not yet switched: fewer means one went missing.
    assert len(exceptions) >= 29
    for name, cls in exceptions.items():
        assert cls.__module__ == "jacobiscope.errors", f"{name} is defined in {cls.__module__}, not jacobiscope.errors"
        assert getattr(errors, name) is cls
        assert issubclass(cls, errors.JacobiscopeError) or issubclass(cls, Warning), name
        assert cls.__doc__ and cls.__doc__.strip(), f"{name} has no docstring"


def test_no_public_exception_is_defined_outside_errors():
    # Walks every module's __all__ (not only the root's re-exports): a new public exception must be born in errors.py.
    outside = {f"{module}.{name}" for (module, name), cls in _package_exceptions().items()
               if cls.__module__ != "jacobiscope.errors"}
    assert outside == set()


def test_errors_all_lists_every_class_defined_there_and_nothing_staged():
    defined = {name for name, value in vars(errors).items()
               if _is_exception(value) and value.__module__ == "jacobiscope.errors" and not name.startswith("_")}
    assert set(errors.__all__) == defined
    assert len(errors.__all__) == len(set(errors.__all__))


@pytest.mark.parametrize("module_name", sorted(OLD_PATHS))
def test_old_import_paths_give_the_same_class(module_name):
    module = importlib.import_module(module_name)
    for name in OLD_PATHS[module_name]:
        assert getattr(module, name) is getattr(errors, name), f"{module_name}.{name} is another class"


def test_moved_errors_keep_their_attributes_and_builtin_bases():
    error = errors.SudokuFileError("row 3 has 80 digits — fix the row", path="puzzles.csv", line=3)
    assert (error.path, error.line, str(error)) == ("puzzles.csv", 3, "row 3 has 80 digits — fix the row")
    # The built-in a caller would catch anyway still catches them, under every import path.
    with pytest.raises(FileNotFoundError):
        raise errors.SudokuDataNotFoundError("no satnet.csv.xz — pass --data")
    from jacobiscope._io import PathError

    with pytest.raises(PathError):
        raise errors.MissingFileError("recipe.json does not exist — check the path")
    assert issubclass(errors.OutputInsideInputError, ValueError) and issubclass(errors.NotAFileError, IsADirectoryError)
    assert str(errors.UsageError("--k 0 is below 1", "pass --k 1 or more")) == "--k 0 is below 1 — pass --k 1 or more"
    assert str(errors.PathError()) == ""


def test_what_the_package_raises_is_caught_through_errors_and_the_old_paths():
    from jacobiscope.cli import main
    from jacobiscope.data import sudoku
    from jacobiscope.recipes.sudoku import SudokuRecipe

    with pytest.raises(errors.SudokuError, match="appears twice in row 1") as caught:
        sudoku.validate_puzzle("55" + "0" * 79)
    assert isinstance(caught.value, sudoku.SudokuError)
    with pytest.raises(errors.RecipeError, match="hidden_size=30 must be divisible by num_heads=8") as caught:
        SudokuRecipe(hidden_size=30, num_heads=8)
    assert isinstance(caught.value, jacobiscope.RecipeError)
    assert main(["demo", "--heads", "3", "--dim", "16"]) == 2  # a UsageError, said in one line
