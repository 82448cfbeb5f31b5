"""Build hook: ship the top-level data folders inside the wheel.

`adapters/` (per-family adapter specs) and `hub_configs/` (published checkpoints) live at the top of the
repository so that people can browse and edit them, but an installed wheel (built from a clone: `python -m
build`) needs them too.
The wheel carries them as `jacobiscope/_shipped/<folder>`; `jacobiscope._resources` looks there first and
falls back to the source tree (editable installs).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED_FOLDERS = ("adapters", "hub_configs")


class BuildPyWithShippedData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parent
        for name in SHIPPED_FOLDERS:
            source = root / name
            if not source.is_dir():
                continue
            target = Path(self.build_lib) / "jacobiscope" / "_shipped" / name
            shutil.rmtree(target, ignore_errors=True)  # a stale build/ must not ship files removed since
            for path in source.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    destination = target / path.relative_to(source)
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, destination)


setup(cmdclass={"build_py": BuildPyWithShippedData})
