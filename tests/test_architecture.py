"""The package's shape, checked: no module imports from a higher layer (imports inside functions included), no
module over 500 lines, no function over 80 lines of code (docstrings aside). Model files under jacobiscope/models
follow the single-model-file policy and are exempt from the size rules."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jacobiscope"

#: The declared layer order, lowest first: a module may import from its own layer and the ones below. The root
#: ``__init__`` (lazy re-exports) and ``__main__`` sit above everything.
LAYERS = (
    ("errors", "_validation", "_io", "_locks", "_progress", "_resources", "_values", "_proportions", "_figures",
     "_probes", "_map_info"),
    ("linalg", "maps", "_map_checks"),
    ("dynamics", "systems"),
    ("models", "data"),
    ("adapters",),
    ("diagnostics",),
    ("report",),
    ("_analyze", "_analyze_describe", "_analyze_options", "_analyze_resume", "_plan", "_depth", "_lens", "_lens_result", "_lens_run", "_per_example", "training", "recipes", "theory", "hub", "_hub_prepare",
     "_hub_files"),
    ("cli",),
)
MODULE_LINES, FUNCTION_LINES = 500, 80


def _layer(module: str):
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the root package
    for index, names in enumerate(LAYERS):
        if parts[1] in names:
            return index
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, module: str):
    """(imported module, line) for every import of a jacobiscope module in the file, at any depth."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{alias.name}" for alias in node.names]
            elif node.module and node.module.split(".")[0] == "jacobiscope":
                names = [node.module]
            else:
                continue
            yield from ((name, node.lineno) for name in names)
        elif isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.startswith("jacobiscope."))


def _sources():
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def test_every_module_has_a_declared_layer():
    unplaced = sorted({_module_name(path) for path in _sources()
                       if _module_name(path) not in ("jacobiscope", "jacobiscope.__main__")
                       and _layer(_module_name(path)) is None})
    assert not unplaced, f"modules without a layer (add them to LAYERS): {unplaced}"


def test_no_module_imports_from_a_higher_layer():
    upward = []
    for path in _sources():
        module = _module_name(path)
        own = _layer(module)
        if own is None:
            continue
        for target, line in _imported(path, module):
            theirs = _layer(target)
            if theirs is not None and theirs > own:
                upward.append(f"{module}:{line} imports {target} (layer {own} -> {theirs})")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def _code_lines(function) -> int:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    return body[-1].end_lineno - body[0].lineno + 1


def test_modules_and_functions_are_small():
    too_big = []
    for path in _sources():
        if "models" in path.relative_to(PACKAGE).parts:
            continue  # the single-model-file policy
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MODULE_LINES:
            too_big.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > FUNCTION_LINES:
                too_big.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: "
                               f"{_code_lines(node)} lines of code")
    assert not too_big, "over the size limits:\n" + "\n".join(too_big)


def test_the_checks_catch_what_they_look_for(tmp_path):
    """The walkers themselves: an upward import inside a function and a long function are seen."""
    source = "def f():\n    from ..report import Report\n" + "    x = 1\n" * 85
    function = ast.parse(source).body[0]
    assert _code_lines(function) == 86
    probe = tmp_path / "_probe.py"  # read as if it sat at jacobiscope/linalg/_probe.py
    probe.write_text(source, encoding="utf-8")
    found = list(_imported(probe, "jacobiscope.linalg._probe"))
    assert found == [("jacobiscope.report", 2)]
    assert _layer("jacobiscope.linalg._probe") < _layer(found[0][0])


def test_research_tooling_is_reached_through_its_subpackage():
    """The root keeps the SDK's entry points; the paper-specific analyses and research workflows moved to
    jacobiscope.dynamics / jacobiscope.recipes, and their old root names warn and give the same object."""
    import jacobiscope

    moved = jacobiscope._MOVED
    assert moved and not set(moved) & set(jacobiscope.__all__)
    for name, home in moved.items():
        with pytest.warns(DeprecationWarning, match=rf"use jacobiscope\.{home}\.{name}"):
            old = getattr(jacobiscope, name)
        assert old is getattr(getattr(jacobiscope, home), name)
    for name in ("analyze", "describe", "measure", "LoopedMap", "Report", "lyapunov_spectrum", "spectral_norm",
                 "SpectralRegTrainer", "register_diagnostic", "load_pretrained"):
        assert name in jacobiscope.__all__
