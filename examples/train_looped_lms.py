"""Train the looped language models of `examples/recipes/looped-lm-*.json` (HRM-Text, Dory, Inkling-2 loop on
fixed-width addition), resumably, one CPU thread each.

    python examples/train_looped_lms.py --out runs/looped-lm                    # every recipe, one after another
    python examples/train_looped_lms.py --out runs/looped-lm --only looped-lm-dory-addition
    python examples/train_looped_lms.py --out runs/looped-lm --parallel 2       # two at a time, the rest queued
    python examples/train_looped_lms.py --list
    python examples/train_looped_lms.py --out runs/looped-lm --keep      # copy each run's resume state into git
    python examples/train_looped_lms.py --out runs/looped-lm --restore   # put kept states back, then rerun to resume

Each recipe trains into ``<out>/<name>/`` (checkpoints, ``validation_history.json``, ``best/``, ``final/``,
``final_ema/``; a log in ``<out>/<name>.log`` with ``--parallel``). Rerunning the same command resumes every run from
its newest complete checkpoint and continues bit-exactly; a finished run is reported, not trained again. A run is
locked while it trains (a second process on the same folder stops at once with FolderBusyError).

``--keep`` copies what resuming needs (the newest complete checkpoint, ``recipe.json``, ``checkpoint_format.json``,
``validation_history.json``, ``best/``) to ``examples/recipes/resume/<name>/`` to commit; ``--restore`` copies it
back into a run folder that has no newer checkpoint, so the next session continues where this one stopped.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # _resume_store, beside this script, also when loaded by path
import _resume_store  # noqa: E402

RECIPES = ROOT / "examples" / "recipes"
STORE = RECIPES / "resume"


def recipe_paths() -> dict[str, Path]:
    """``name -> recipe file`` of every looped-LM recipe shipped in examples/recipes."""
    return {path.stem: path for path in sorted(RECIPES.glob("looped-lm-*.json"))}


def train_one(name: str, out: Path) -> dict:
    """Train (or resume, or report) the run ``name`` into ``out/name``."""
    import torch

    from jacobiscope.recipes.looped_lm import LoopedLMRecipe, train_looped_lm

    torch.set_num_threads(1)
    recipe = LoopedLMRecipe.from_json(recipe_paths()[name])
    return train_looped_lm(recipe, out / name)


def run_parallel(names: list[str], out: Path, parallel: int) -> None:
    """Train ``names`` in child processes, at most ``parallel`` at once (the rest start as others finish); each child
    logs to ``out/<name>.log``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    queue, running = list(names), {}
    while queue or running:
        while queue and len(running) < parallel:
            name = queue.pop(0)
            log = open(out / f"{name}.log", "a")
            command = [sys.executable, __file__, "--out", str(out), "--only", name]
            running[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log)
            print(f"started {name} (pid {running[name][0].pid}), log {out / f'{name}.log'}", flush=True)
        time.sleep(10)
        for name, (process, log) in list(running.items()):
            if process.poll() is not None:
                log.close()
                print(f"{name} ended with exit code {process.returncode}", flush=True)
                del running[name]


def keep(names: list[str], out: Path) -> None:
    """Copy each run's resume state to examples/recipes/resume/<name>/ (replacing the previous copy)."""
    for name in names:
        step = _resume_store.keep(out / name, STORE / name)
        print(f"{name}: " + (f"kept step {step} in {STORE / name}" if step is not None else "nothing newer to keep"))


def restore(names: list[str], out: Path) -> None:
    """Copy kept resume states back into run folders that hold no newer checkpoint."""
    for name in names:
        step = _resume_store.restore(STORE / name, out / name)
        print(f"{name}: " + (f"restored step {step} into {out / name}" if step is not None else "nothing newer to restore"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "runs" / "looped-lm"), help="folder of the run folders")
    parser.add_argument("--only", nargs="*", help="recipe names (default: all)")
    parser.add_argument("--parallel", type=int, default=0, help="train in this many child processes at once")
    parser.add_argument("--list", action="store_true", help="list the recipes and exit")
    parser.add_argument("--keep", action="store_true", help="copy each run's resume state into examples/recipes/resume")
    parser.add_argument("--restore", action="store_true", help="put kept resume states back into --out")
    args = parser.parse_args(argv)
    known = recipe_paths()
    if args.list:
        for name, path in known.items():
            print(name, json.loads(path.read_text()).get("extra", {}).get("why", ""))
        return
    names = args.only or list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown recipe(s) {unknown} — use some of {list(known)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.keep or args.restore:
        (keep if args.keep else restore)(names, out)
        return
    if args.parallel:
        run_parallel(names, out, args.parallel)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in names:
        summary = train_one(name, out)
        print(name, json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
