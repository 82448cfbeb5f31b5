"""Every ```python block of the README runs as written, and every output the README shows is what the code prints.

The blocks and outputs are read by `.ci/readme_outputs.py` (the script that regenerates the outputs:
``python .ci/readme_outputs.py``). Each block runs as a script of its own in an empty folder, offline
(``HF_HUB_OFFLINE=1``): a block may use only the names it defines. Blocks marked ``<!-- slow -->`` and outputs
marked ``output slow`` run under ``-m slow``.
"""
import ast
import builtins
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_outputs", ROOT / ".ci" / "readme_outputs.py")
readme_outputs = sys.modules.setdefault("readme_outputs", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(readme_outputs)   # registered first: its dataclass looks its module up

BLOCKS = readme_outputs.blocks((ROOT / "README.md").read_text())
PYTHON = [block for block in BLOCKS if block.kind == "python"]
OUTPUTS = [block for block in BLOCKS if block.kind == "output"]
SHOWN_BY = {block.python: block for block in OUTPUTS if block.python is not None}   # python index -> its output
COMMAND_OUTPUTS: dict = {}   # one run of the main job serves every output that filters it


def _param(block, index=None):
    marks = [pytest.mark.slow] if block.slow else []
    return pytest.param(block if index is None else index, marks=marks, id=f"line{block.line}")


def undefined_names(code: str) -> set[str]:
    """Names a block reads but never binds (imports, assignments, defs, arguments) and that are not builtins.

    Example::

        >>> sorted(undefined_names("import torch\\nx = torch.zeros(2)\\nprint(x + y)"))
        ['y']
    """
    tree, bound, read = ast.parse(code), set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound


def test_the_readme_has_python_blocks_and_outputs():
    assert len(PYTHON) >= 10, [block.line for block in PYTHON]
    assert any(not block.slow for block in OUTPUTS), "at least one output is checked in the default suite"


@pytest.mark.parametrize("block", [pytest.param(b, id=f"line{b.line}") for b in PYTHON])
def test_block_uses_only_names_it_defines(block):
    missing = undefined_names(block.body)
    assert not missing, f"README line {block.line}: the block reads {sorted(missing)} without defining them"


def test_undefined_names_sees_what_a_block_lacks():
    assert undefined_names("report = jacobiscope.analyze(model, ids)") == {"jacobiscope", "model", "ids"}
    assert undefined_names("import torch\nfrom torch import nn\nclass A(nn.Module):\n    def f(self, x):\n"
                           "        return [y for y in x]\n") == set()


@pytest.mark.parametrize("index", [_param(b, i) for i, b in enumerate(BLOCKS) if b.kind == "python"])
def test_python_block_runs(index, tmp_path):
    block = BLOCKS[index]
    done = readme_outputs.run_python(block.body, tmp_path)
    assert done.returncode == 0, f"README block at line {block.line} failed:\n{done.stderr[-4000:]}"
    shown = SHOWN_BY.get(index)
    if shown is not None:   # the output the README shows right under the block is what it prints now
        assert done.stdout.rstrip("\n") == shown.body, (
            f"README line {shown.line}: the shown output is stale — run python .ci/readme_outputs.py")


@pytest.mark.parametrize("index", [_param(b, i) for i, b in enumerate(BLOCKS)
                                   if b.kind == "output" and b.python is None])
def test_shown_command_output_is_current(index, tmp_path):
    block = BLOCKS[index]
    produced = readme_outputs.produce(BLOCKS, index, tmp_path, COMMAND_OUTPUTS)
    assert produced, f"README line {block.line}: {block.source!r} printed nothing"
    assert produced == block.body, (f"README line {block.line}: the output of {block.source!r} is stale — run "
                                    "python .ci/readme_outputs.py\nnow:\n" + produced)


def test_regenerate_rewrites_only_the_marked_blocks(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- output: echo 3 + 4 = $((3 + 4)) -->\n```\nstale\n```\n"
                      "```python\nprint(6 * 7)\n```\n<!-- output: python block above -->\n```\n```\n"
                      "```\nuntouched\n```\n")
    script = ROOT / ".ci" / "readme_outputs.py"
    check = subprocess.run([sys.executable, str(script), "--readme", str(readme), "--check"], capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 1 and "line 3" in check.stdout and "line 10" in check.stdout, check.stdout
    subprocess.run([sys.executable, str(script), "--readme", str(readme)], check=True, capture_output=True,
                   timeout=120)
    assert readme.read_text() == ("intro\n<!-- output: echo 3 + 4 = $((3 + 4)) -->\n```\n3 + 4 = 7\n```\n"
                                  "```python\nprint(6 * 7)\n```\n<!-- output: python block above -->\n```\n42\n```\n"
                                  "```\nuntouched\n```\n")
    again = subprocess.run([sys.executable, str(script), "--readme", str(readme), "--check"], timeout=120,
                           capture_output=True)
    assert again.returncode == 0


def test_an_output_marker_needs_a_python_block_above():
    with pytest.raises(ValueError, match="follows no ```python block"):
        readme_outputs.blocks("text\n<!-- output: python block above -->\n```\n```\n")
