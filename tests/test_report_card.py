"""The dynamics card: `Report.to_dataset` (one row per layer and input, pinned to its provenance), `Report.merge`
(separate runs of the same model and settings give the numbers of one run; conflicts refused by name) and
`Report.to_hub_folder` (dataset card metadata, parquet, the full report), read back offline."""
import math
import sys
from pathlib import Path

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.report import FORMAT_VERSION, LayerResult, Report

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import tiny_inputs, tiny_model  # noqa: E402

datasets = pytest.importorskip("datasets")

OPTIONS = dict(loops=3, k=2, eigen_k=2, diagnostics=["spectral_norm", "eigenvalues", "lyapunov", "regime"],
               progress=False)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _numbers(row) -> dict:
    """A row's scalars that a rerun must reproduce (not its wall-clock seconds)."""
    return {key: value for key, value in row.scalars().items() if key != "seconds"}


@pytest.fixture(scope="module")
def full():
    return jacobiscope.analyze(tiny_model("gpt2"), tiny_inputs("gpt2"), layers=[0, 1], **OPTIONS)


def _synthetic(layer=0, index=0, label="x", **provenance):
    row = LayerResult(index, label, layer, "block", None, 2, [4, 8], [1.0, 2.0, math.inf], [0.5, math.nan],
                      results={"lyapunov": {"exponents": [0.25], "stderr": [0.01], "history": [[0.3], [0.25]],
                                                "kaplan_yorke": 1.0}})
    base = {"model": "org/tiny", "dtype": "float32", "loops": 2,
            "versions": {"torch": "2.13.0", "transformers": "5.0", "jacobiscope": "0.1.0"}}
    return Report([row], {**base, **provenance}, [])


def test_dataset_rows_are_the_report_numbers_with_their_provenance(full):
    dataset = full.to_dataset()
    assert dataset.num_rows == len(full.rows) == 2
    for record, row in zip(dataset, full.rows):
        for key, value in row.scalars().items():
            assert _same(record[key], value), key
        assert record["lambda_max"] == row.results["lyapunov"].max
    record = dataset[0]
    assert record["torch_version"] == torch.__version__
    assert record["transformers_version"] == transformers.__version__
    assert record["jacobiscope_version"] == jacobiscope.__version__
    assert record["precision"] == "float32" and record["model_class"] == "GPT2Model"
    assert record["report_format_version"] == FORMAT_VERSION
    assert record["model_revision"] is None  # unknown for a model built from a config


def test_separate_runs_merge_into_the_numbers_of_one_run(full):
    first = Report([full.rows[0]], dict(full.provenance, layers=[0]), [])
    second = jacobiscope.analyze(tiny_model("gpt2"), tiny_inputs("gpt2"), layers=[1], **OPTIONS)
    merged = first.merge(second)
    assert [(row.input_index, row.layer) for row in merged.rows] == [(0, 0), (0, 1)]
    for got, expected in zip(merged.rows, full.rows):
        assert _numbers(got) == pytest.approx(_numbers(expected), nan_ok=True)
    assert merged.provenance["layers"] == [0, 1] and merged.provenance["merged_from"] == 2
    assert merged.provenance["seconds"] == pytest.approx(full.provenance["seconds"] + second.provenance["seconds"])
    assert Report.merge(first, second) == merged
    assert merged.to_dataset()["lambda_max"][:] == full.to_dataset()["lambda_max"][:]


def test_merge_refuses_conflicting_provenance_and_names_the_fix():
    with pytest.raises(ValueError, match=r"differ in dtype \('float32' in report 0, 'float64' in report 1\).*"
                                         r"allow=\('dtype',\)"):
        _synthetic(0).merge(_synthetic(1, dtype="float64"))
    with pytest.raises(ValueError, match="differ in versions.torch"):
        _synthetic(0).merge(_synthetic(1, versions={"torch": "2.0", "transformers": "5.0", "jacobiscope": "0.1.0"}))
    with pytest.raises(ValueError, match="differ in model_revision"):
        _synthetic(0, model_revision="abc123").merge(_synthetic(1, model_revision="def456"))
    with pytest.raises(ValueError, match=r"input 'x' layer 0 \(block\) is in report 0 and report 1"):
        _synthetic(0).merge(_synthetic(0))
    with pytest.raises(TypeError, match="not a Report"):
        _synthetic(0).merge({"rows": []})
    with pytest.raises(ValueError, match="not pinned"):
        _synthetic(0).merge(_synthetic(1), allow=("inputs",))
    allowed = _synthetic(0).merge(_synthetic(1, dtype="float64", device="cuda"), allow="dtype")
    assert allowed.provenance["dtype"] == ["float32", "float64"]
    assert allowed.to_dataset()["precision"][:] == ["float32, float64"] * 2


def test_merge_gives_a_different_input_a_fresh_index():
    merged = _synthetic(0, label="first text").merge(_synthetic(0, label="second text"),
                                                     _synthetic(1, label="first text"))
    assert [(row.input_index, row.input_label, row.layer) for row in merged.rows] == [
        (0, "first text", 0), (1, "second text", 0), (0, "first text", 1)]
    assert merged.provenance["inputs"] == 2


def test_hub_folder_reads_back_offline_with_the_same_numbers(full, tmp_path):
    folder = full.to_hub_folder(tmp_path / "card", license="cc-by-4.0", base_model="org/tiny-gpt2")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "data/train-00000-of-00001.parquet", "report.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    rows = datasets.load_dataset("parquet", data_files=str(folder / "data" / "*.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    for record, row in zip(rows, full.rows):
        for key, value in row.scalars().items():
            assert _same(record[key], value), key
    assert rows["torch_version"][:] == [torch.__version__] * 2
    assert Report.from_hub_folder(folder) == full
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(folder / "README.md")
    assert card.data.license == "cc-by-4.0" and card.data.base_model == "org/tiny-gpt2"
    assert "jacobiscope" in card.data.tags and "dynamics-card" in card.data.tags
    assert card.data.configs == [{"config_name": "default", "data_files": [
        {"split": "train", "path": "data/train-00000-of-00001.parquet"}]}]
    assert "## Provenance" in card.text and torch.__version__ in card.text


def test_hub_folder_never_overwrites_without_overwrite(tmp_path, monkeypatch):
    report = _synthetic(0, model_revision="0123abcd")
    folder = report.to_hub_folder(tmp_path / "card")
    # A model from the Hub (its revision known) is the card's base model; a local folder's name is not.
    assert "base_model: org/tiny" in (folder / "README.md").read_text()
    assert folder.stat().st_mode & 0o755 == 0o755  # readable by others, like any folder the user makes
    local = _synthetic(0, model="checkpoints/model").to_hub_folder(tmp_path / "local")
    assert "base_model" not in (local / "README.md").read_text().split("---")[1]
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        _synthetic(1, model_revision="0123abcd").to_hub_folder(folder)
    assert Report.from_hub_folder(folder) == report
    replaced = _synthetic(1).to_hub_folder(folder, overwrite=True)
    assert Report.from_hub_folder(replaced).rows[0].layer == 1
    (tmp_path / "empty").mkdir()
    assert _synthetic(0).to_hub_folder(tmp_path / "empty").joinpath("report.json").is_file()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        report.to_hub_folder(tmp_path / "file")

    def interrupted(self, path=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(Report, "to_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.to_hub_folder(folder, overwrite=True)
    monkeypatch.undo()
    assert Report.from_hub_folder(folder).rows[0].layer == 1  # the old card is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card", "empty", "file", "local"]
