"""Screenshots of the HTML report in a real headless browser (Debian's Chromium), at 1400 and 800 px wide.

    apt-get install -y chromium    # once
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/screenshot_report.py [--chromium /usr/bin/chromium]

Writes the quick start's report (itrsa-sudoku, SATNet test rows 9000-9003, 32 loops) and a MiniLM report (two
layers, block mode), then screenshots each one's first screen (1000 px high) and whole page at both widths into
benchmarks/figures/report_*.png. Look at them: the verdicts must be on the first screen, tables must wrap or scroll
inside the page at 800 px, and the figures must be readable.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

import jacobiscope

FIGURES = Path(__file__).resolve().parent / "figures"


def _reports(folder: Path) -> dict[str, Path]:
    from jacobiscope.data import sudoku
    from jacobiscope.hub import load_pretrained

    solver = load_pretrained("itrsa-sudoku")
    _, test = sudoku.satnet_splits()
    puzzles = sudoku.to_tensor(list(test["puzzle"][:4]))
    labels = [f"SATNet test row {9000 + i}" for i in range(4)]
    sudoku_report = jacobiscope.analyze(solver, puzzles, loops=32, progress=False, input_labels=labels)
    paths = {"sudoku": sudoku_report.save_html(folder / "sudoku.html")}
    from transformers import AutoModel, AutoTokenizer

    folder_minilm = jacobiscope.hub.locate_model("minilm")
    model, tokenizer = AutoModel.from_pretrained(folder_minilm), AutoTokenizer.from_pretrained(folder_minilm)
    if model is not None:
        inputs = tokenizer(["Looped transformers apply the same block again and again.",
                            "A much longer sentence about the Jacobian of the looped map, its spectral norm and "
                            "its eigenvalues, which normalization keeps inside the unit circle."],
                           return_tensors="pt", padding=True)
        text_report = jacobiscope.analyze(model, inputs, layers=[0, 5], loops=16, progress=False)
        paths["minilm"] = text_report.save_html(folder / "minilm.html")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    torch.manual_seed(0)
    FIGURES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for name, path in _reports(Path(folder)).items():
            for width in (1400, 800):
                for part, height in (("first_screen", 1000), ("page", 6000)):
                    target = FIGURES / f"report_{name}_{width}_{part}.png"
                    subprocess.run([args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                    f"--window-size={width},{height}", f"--screenshot={target}", path.as_uri()],
                                   check=True, capture_output=True, timeout=180)
                    print(f"wrote {target.relative_to(FIGURES.parent.parent)}")


if __name__ == "__main__":
    main()
