"""The dynamics card: a Hub-ready dataset folder (README.md with the dataset card metadata, the rows as parquet, the
full report JSON), written atomically and read back offline.

Example::

    >>> import pathlib, tempfile
    >>> from jacobiscope.report import LayerResult, Report
    >>> row = LayerResult(0, "x", 3, "block", None, 2, [4, 8], [1.0, 1.0, 1.0], [0.1, 0.01])
    >>> report = Report([row], {"model": "org/tiny-model", "dtype": "float32"}, [])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     card = report.to_hub_folder(pathlib.Path(folder) / "card")
    ...     sorted(str(p.relative_to(card)) for p in card.rglob("*") if p.is_file())
    ...     Report.from_hub_folder(card) == report
    ['README.md', 'data/train-00000-of-00001.parquet', 'report.json']
    True
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from ..errors import ArgumentTypeError, MissingFileError, NotAFolderError

logger = logging.getLogger(__name__)

__all__ = ["to_hub_folder", "from_hub_folder", "DATA_FILE", "REPORT_FILE", "TAGS"]

DATA_FILE = "data/train-00000-of-00001.parquet"
REPORT_FILE = "report.json"
TAGS = ("jacobiscope", "dynamics-card", "jacobian", "lyapunov-exponents", "interpretability")

# A Hub repository id ("org/name"): only such a model name becomes the card's base_model (a local folder does not).
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _target(path, overwrite: bool) -> Path:
    """Check the output folder before any work: not a file, and empty or ``overwrite=True``."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"Report.to_hub_folder: path must be a folder path, got {type(path).__name__} — pass e.g. "
                        "'dynamics-card'")
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise NotAFolderError(f"Report.to_hub_folder: {str(path)!r} is a file, not a folder — pass a folder path")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(f"Report.to_hub_folder: {str(path)!r} is a folder that is not empty — pass "
                              "overwrite=True to replace it, or choose a new folder")
    return target


def _metadata(report, license: str, base_model: str | None, pretty_name: str | None, rows: int) -> dict:
    """The dataset card's YAML metadata: license, tags, base_model, the data files of the default config."""
    from ._dataset import provenance_columns

    model = report.provenance.get("model")
    # Only a model that came from the Hub (its revision is known) is its own base_model: a local folder's name
    # ("checkpoints/model") looks like a repository id too.
    known_revision = provenance_columns(report.provenance)["model_revision"] is not None
    if base_model is None and known_revision and isinstance(model, str) and _REPO_ID.match(model) \
            and not Path(model).exists():
        base_model = model
    metadata = {"license": license, "tags": list(TAGS),
                "pretty_name": pretty_name or f"jacobiscope dynamics card: {model or 'a model'}",
                "size_categories": ["n<1K" if rows < 1000 else "1K<n<10K" if rows < 10_000 else "10K<n<100K"]}
    if base_model:
        metadata["base_model"] = base_model
    metadata["configs"] = [{"config_name": "default", "data_files": [{"split": "train", "path": DATA_FILE}]}]
    return metadata


def _readme(report, metadata: dict) -> str:
    import yaml

    from ._dataset import provenance_columns

    model = report.provenance.get("model") or "the model"
    provenance = provenance_columns(report.provenance)
    lines = ["---", yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# Dynamics card: {model}", "",
             "The local dynamics of each measured layer of this model, as measured by jacobiscope "
             f"{provenance['jacobiscope_version'] or ''}: each layer's block looped on its own output, "
             "with the Jacobian's spectral norm and eigenvalues, the Lyapunov exponents, the token clusters and a "
             "regime verdict. One row per (input, layer); the `report.json` file holds the whole report (the "
             "trajectories, histories and evidence that the table leaves out).", "",
             "## Provenance", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {'unknown' if value is None else value} |" for key, value in provenance.items()]
    if metadata.get("base_model"):
        lines.append(f"| base model | [{metadata['base_model']}](https://huggingface.co/{metadata['base_model']}) |")
    else:
        lines += ["", "The model's Hub id is not known: write it with `to_hub_folder(..., base_model=\"org/name\")`."]
    lines += ["", "## Summary", "", "```text", report.summary(), "```", "", "## Use", "", "```python",
              "import datasets", "rows = datasets.load_dataset(\"parquet\", data_files=\"" + DATA_FILE +
              "\", split=\"train\")  # or load_dataset(\"<user>/<repo>\") once pushed", "",
              "from jacobiscope.report import Report",
              "report = Report.from_json(\"report.json\")  # the full report: report.summary(), report.plot()",
              "```", "", "Push this folder to the Hub with `huggingface_hub`:", "", "```python",
              "from huggingface_hub import upload_folder",
              "upload_folder(repo_id=\"<user>/<repo>\", folder_path=\".\", repo_type=\"dataset\")", "```", ""]
    return "\n".join(lines)


def to_hub_folder(report, path, *, overwrite: bool = False, license: str = "other", base_model: str | None = None,
                  pretty_name: str | None = None) -> Path:
    """Write the dynamics card folder (built in a temporary sibling folder, then renamed into place)."""
    from pyarrow import parquet

    if not isinstance(overwrite, bool):
        raise ArgumentTypeError(f"Report.to_hub_folder: overwrite must be True or False, got {overwrite!r}")
    target = _target(path, overwrite)
    report.validate()  # a card that its own report.json cannot be read back from is refused before writing
    dataset = report.to_dataset()  # needs datasets: fails before any file is written
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        building.chmod(0o777 & ~_umask())  # mkdtemp's 0o700 would make the card private to its writer
        (building / DATA_FILE).parent.mkdir(parents=True)
        # pyarrow directly: the same file (the features ride in the schema metadata) without a progress bar.
        parquet.write_table(dataset.data.table, building / DATA_FILE)
        report.to_json(building / REPORT_FILE)
        metadata = _metadata(report, license, base_model, pretty_name, len(dataset))
        (building / "README.md").write_text(_readme(report, metadata), encoding="utf-8")
        _replace_folder(building, target)
    finally:
        if building.exists():  # a failure (or Ctrl-C) before the rename leaves no half-written folder
            shutil.rmtree(building, ignore_errors=True)
    logger.info("wrote the dynamics card %s (%d rows)", target, len(dataset))
    return target


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _replace_folder(building: Path, target: Path) -> None:
    """Rename ``building`` to ``target``; an existing ``target`` is moved aside first and removed only after."""
    if not target.exists() or not any(target.iterdir()):
        if target.exists():
            target.rmdir()
        os.rename(building, target)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    aside.rmdir()
    os.rename(target, aside)
    try:
        os.rename(building, target)
    except BaseException:
        os.rename(aside, target)  # the old folder comes back whole
        raise
    shutil.rmtree(aside, ignore_errors=True)


def from_hub_folder(cls, path):
    """The report of a dynamics card folder (its ``report.json``)."""
    source = Path(path) / REPORT_FILE
    if not source.is_file():
        raise MissingFileError(f"Report.from_hub_folder: {str(path)!r} has no {REPORT_FILE} — pass a folder "
                                "written by Report.to_hub_folder")
    return cls.from_json(source)
