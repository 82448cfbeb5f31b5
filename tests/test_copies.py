"""Code copied between the reference models (the single-model-file policy: each model file must load alone from the
Hub) carries a ``# Copied from <module>.<name>`` marker; every marked segment must equal its source, so a fix made in
one model cannot silently miss the other.

A marker may end in ``with A->B, C->D`` (the source is compared after those replacements) and in a parenthesized
note. The marked segment is the statement that follows the marker (a def, a class or an assignment) with the comment
lines between the two; the source segment is the named statement with the comment lines directly above it."""
from __future__ import annotations

import ast
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "jacobiscope" / "models"
MARKER = re.compile(r"^(?P<indent>[ \t]*)# Copied from (?P<target>[A-Za-z_][\w.]*)(?P<rest>.*)$")
# The helpers the two reference models share today (the model file, then the name): a marker lost in an edit fails.
SHARED = {("modeling_akorn.py", name) for name in (
    "_check_puzzles", "_MAX_LOOPS", "_count", "_check_labels", "_as_puzzle_tensor", "_digit_rows",
    "_check_contradictions", "_readouts", "_is_solution", "_loop_counts", "_cross_entropy")} | {
    ("configuration_akorn.py", name) for name in ("_ConfigError", "_int_field", "_real_field", "_bool_field")}


@dataclass
class Copy:
    file: Path
    line: int  # 1-based line of the marker
    name: str  # the copy's own name (the statement after the marker)
    target: str  # dotted source, as written
    replacements: list


def _replacements(rest: str) -> list:
    """``" with A->B, C->D (note)"`` -> ``[("A", "B"), ("C", "D")]``; a bare note or nothing -> ``[]``."""
    rest = re.sub(r"\s*\(.*\)\s*$", "", rest).strip()
    if not rest:
        return []
    assert rest.startswith("with "), f"cannot read the marker tail {rest!r}: write 'with A->B, C->D' or '(a note)'"
    pairs = []
    for item in rest[len("with "):].split(","):
        old, arrow, new = item.strip().partition("->")
        assert arrow and old.strip(), f"cannot read the replacement {item!r}: write it as A->B"
        pairs.append((old.strip(), new.strip()))
    return pairs


def _node_name(node) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _statements(tree) -> list:
    """Every named statement of a module, methods of its classes included, as (qualified name, node)."""
    found = []

    def walk(body, prefix):
        for node in body:
            name = _node_name(node)
            if name is not None:
                found.append((prefix + name, node))
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return found


def _first_line(node) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


def _segment(lines: list, node, comments_from: int) -> str:
    """The node's source (decorators included) with the comment lines from ``comments_from`` (1-based), dedented."""
    return textwrap.dedent("\n".join(lines[comments_from - 1:node.end_lineno])) + "\n"


def _comments_above(lines: list, first: int) -> int:
    """The first line of the comment block directly above line ``first`` (1-based; ``first`` when none). A marker
    line ends the block: it belongs to the marker, not to the code."""
    start = first
    while start > 1 and lines[start - 2].lstrip().startswith("#") and not MARKER.match(lines[start - 2]):
        start -= 1
    return start


def find_copies(root: Path = ROOT, folder: Path | None = None) -> list:
    """Every ``# Copied from`` marker under ``folder`` (default ``<root>/jacobiscope/models``)."""
    copies = []
    for file in sorted((folder or root / "jacobiscope" / "models").rglob("*.py")):
        lines = file.read_text(encoding="utf-8").splitlines()
        starts = {_first_line(node): (name, node) for name, node in _statements(ast.parse("\n".join(lines)))}
        for index, text in enumerate(lines, start=1):
            match = MARKER.match(text)
            if not match:
                continue
            code = index + 1
            while code <= len(lines) and lines[code - 1].lstrip().startswith("#"):
                code += 1
            assert code in starts, f"{file.name}:{index}: no def, class or assignment follows the marker"
            copies.append(Copy(file, index, starts[code][0], match["target"], _replacements(match["rest"])))
    return copies


def _source_file(root: Path, target: str) -> tuple:
    """``jacobiscope.models.itrsa.modeling_itrsa._count`` -> (that module's file, ``_count``)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = root.joinpath(*parts[:cut]).with_suffix(".py")
        if path.is_file():
            return path, ".".join(parts[cut:])
    raise AssertionError(f"the marker names {target!r}, but no module file of that name exists under {root}")


def marked_segment(copy: Copy) -> str:
    lines = copy.file.read_text(encoding="utf-8").splitlines()
    node = dict(_statements(ast.parse("\n".join(lines))))[copy.name]
    return _segment(lines, node, copy.line + 1)


def source_segment(copy: Copy, root: Path = ROOT) -> str:
    path, name = _source_file(root, copy.target)
    lines = path.read_text(encoding="utf-8").splitlines()
    statements = dict(_statements(ast.parse("\n".join(lines))))
    assert name in statements, f"{copy.file.name}:{copy.line}: {copy.target} does not exist (no {name} in {path.name})"
    node = statements[name]
    text = _segment(lines, node, _comments_above(lines, _first_line(node)))
    for old, new in copy.replacements:
        text = text.replace(old, new)
    return text


def drifted(root: Path = ROOT, folder: Path | None = None) -> list:
    """``file:line name`` of every marked segment that differs from its source."""
    return [f"{copy.file.name}:{copy.line} {copy.name} (copy of {copy.target})"
            for copy in find_copies(root, folder) if marked_segment(copy) != source_segment(copy, root)]


def test_every_marked_copy_equals_its_source():
    copies = find_copies()
    found = {(copy.file.name, copy.name) for copy in copies}
    assert SHARED <= found, f"markers lost: {sorted(SHARED - found)}"
    for copy in copies:  # the marker names the statement that follows it
        assert copy.target.rsplit(".", 1)[-1] == copy.name.rsplit(".", 1)[-1] or copy.replacements, copy
    assert drifted() == [], "copies drifted from their source: re-copy the source (or fix both)"


def test_the_checker_catches_one_changed_line(tmp_path):
    shutil.copytree(ROOT / "jacobiscope", tmp_path / "jacobiscope",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    copy = tmp_path / "jacobiscope" / "models" / "akorn" / "modeling_akorn.py"
    assert drifted(tmp_path) == []
    text = copy.read_text()
    line = '    return F.cross_entropy(logits.reshape(-1, 9), (labels.reshape(-1) - 1).long())\n'
    assert text.count(line) == 1
    copy.write_text(text.replace(line, line.replace("- 1", "- 0")))
    assert drifted(tmp_path) == [f"modeling_akorn.py:{_marker_line(copy, '_cross_entropy')} _cross_entropy "
                                 "(copy of jacobiscope.models.itrsa.modeling_itrsa._cross_entropy)"]
    # a changed comment above a copied constant counts too; a change outside every marked segment does not
    text = copy.read_text().replace("# would run for hours instead of failing.", "# would run for hours.")
    copy.write_text(text + "\n\nUNMARKED = 1\n")
    assert [entry.split()[1] for entry in drifted(tmp_path)] == ["_MAX_LOOPS", "_cross_entropy"]


def _marker_line(file: Path, name: str) -> int:
    return next(copy.line for copy in find_copies(file.parents[3], file.parent) if copy.name == name)


def test_markers_with_replacements_and_methods(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(textwrap.dedent('''\
        class Alpha:
            # why: a comment travels with the code
            def step(self, x):
                return AlphaHelper(x) + 1
        '''))
    (package / "b.py").write_text(textwrap.dedent('''\
        class Beta:
            # Copied from pkg.a.Alpha.step with Alpha->Beta
            # why: a comment travels with the code
            def step(self, x):
                return BetaHelper(x) + 1


        # Copied from pkg.a.Alpha.step with Alpha->Beta (a note)
        def step(self, x):
            return BetaHelper(x) + 2
        '''))
    copies = find_copies(tmp_path, package)
    assert [(c.name, c.replacements) for c in copies] == [("Beta.step", [("Alpha", "Beta")]),
                                                          ("step", [("Alpha", "Beta")])]
    assert drifted(tmp_path, package) == ["b.py:8 step (copy of pkg.a.Alpha.step)"]
