"""jacobiscope.recipes.sudoku: random loop counts per batch, and checkpoint selection on generated puzzles only."""
import json

import pytest
import torch

from jacobiscope.data import sudoku
from jacobiscope.recipes.sudoku import LoopCountCollator, SudokuRecipe, build_model, train_sudoku, validation_puzzles


def test_loop_count_collator_draws_every_count_in_range():
    collate = LoopCountCollator(3, 6, seed=1)
    rows = [{"input_ids": torch.zeros(81, dtype=torch.long), "labels": torch.ones(81, dtype=torch.long)}] * 3
    drawn = [collate(rows)["loops"] for _ in range(200)]
    assert set(drawn) == {3, 4, 5, 6}  # odd and even alike, nothing outside the range
    assert LoopCountCollator(7, 7)(rows)["loops"] == 7 and "supervise_every" not in LoopCountCollator(7, 7)(rows)
    assert LoopCountCollator(7, 7, supervise_every=4)(rows)["supervise_every"] == 4
    batch = collate(rows)
    assert batch["input_ids"].shape == (3, 81) and batch["labels"].dtype == torch.long
    with pytest.raises(ValueError, match="loops_min <= loops_max"):
        SudokuRecipe(loops_min=5, loops_max=4).training_loops()


def test_validation_puzzles_are_fresh_unique_and_not_test_puzzles():
    recipe = SudokuRecipe(eval_limit=12, validation_givens=(31, 42))
    puzzles, solutions = validation_puzzles(recipe)
    again, _ = validation_puzzles(recipe)
    assert torch.equal(puzzles, again)  # fixed seed: every run selects on the same puzzles
    strings = sudoku.to_strings(puzzles)
    givens = [81 - p.count("0") for p in strings]
    assert all(31 <= g <= 42 for g in givens)
    assert all(sudoku.count_solutions(p) == 1 for p in strings[:4])
    assert sudoku.board_accuracy(solutions, puzzles, solutions) == 1.0
    _, test = sudoku.satnet_splits()
    assert not set(strings) & set(test["puzzle"])


def test_training_sees_random_loop_counts_and_selects_on_validation(tmp_path):
    recipe = SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=2, loops_min=1, loops_max=4,
                          batch_size=16, learning_rate=3e-3, max_steps=16, warmup_steps=0, train_limit=64,
                          eval_limit=10, validation_loops=[2, 3], save_steps=8, logging_steps=4, ema_beta=0.0,
                          augment=False)
    seen = []
    original = build_model

    def recording_build(r):
        model = original(r)
        def record(module, args, kwargs):
            if module.training:  # training batches only, not the validation solves
                seen.append(kwargs.get("loops"))

        model.register_forward_pre_hook(record, with_kwargs=True)
        return model

    import jacobiscope.recipes.sudoku as module
    module.build_model, saved = recording_build, module.build_model
    try:
        train_sudoku(recipe, tmp_path / "run", progress=False)
    finally:
        module.build_model = saved
    training_calls = [count for count in seen if count is not None]
    assert len(training_calls) == len(seen) == 16
    assert set(training_calls) <= {1, 2, 3, 4} and len(set(training_calls)) >= 3
    assert {count % 2 for count in training_calls} == {0, 1}
    history = json.loads((tmp_path / "run" / "accuracy_history.json").read_text())
    assert [entry["step"] for entry in history] == [8, 16]
    # The recorded score is the mean board accuracy over the validation loop counts, recomputed independently.
    best = type(original(recipe)).from_pretrained(tmp_path / "run" / "best")
    puzzles, solutions = validation_puzzles(recipe)
    expected = sum(sudoku.board_accuracy(best.solve(puzzles, loops=t), puzzles, solutions) for t in (2, 3)) / 2
    assert max(entry["validation_board_accuracy"] for entry in history) == pytest.approx(expected)
    # best/ is the save with the highest (board, blank-cell) accuracy: a tiny run solves no board, and the first save
    # must not win every tie at 0; its blank-cell accuracy, recomputed from best/, is the chosen record's.
    chosen = max(history, key=lambda entry: (entry["validation_board_accuracy"], entry["validation_cell_accuracy"]))
    cells = sum(sudoku.cell_accuracy(best.solve(puzzles, loops=t), puzzles, solutions) for t in (2, 3)) / 2
    assert cells == pytest.approx(chosen["validation_cell_accuracy"])
    assert json.loads((tmp_path / "run" / "best" / "accuracy.json").read_text())["step"] == chosen["step"]


def test_predict_along_and_per_puzzle_records():
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
    from jacobiscope.recipes.sudoku import evaluate_sudoku, predict_along, puzzle_records

    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3)).eval()
    train, _ = sudoku.satnet_splits(limit=9)
    puzzles, solutions = sudoku.to_tensor(list(train["puzzle"])), sudoku.to_tensor(list(train["solution"]))
    predictions = predict_along(model, puzzles, loops=[2, 3], batch_size=4)
    # Make one grid right at T=3 only, so solved_at is known independently of the (untrained) model.
    predictions[3][5] = solutions[5]
    records = puzzle_records(puzzles, solutions, predictions)
    assert records[5]["solved_at"][-1] == 3
    for index, record in enumerate(records):
        expected = [t for t in (2, 3) if torch.equal(predictions[t][index], solutions[index])]
        assert record["solved_at"] == expected and record["index"] == index
        assert record["givens"] == int((puzzles[index] > 0).sum())
        assert record["rounds_naked"] == sudoku.propagation_rounds(train["puzzle"][index])
    scores = evaluate_sudoku(model, puzzles, solutions, loops=[2, 3], predictions=predictions)
    assert scores[3]["board_accuracy"] == pytest.approx(sum(3 in r["solved_at"] for r in records) / 9)


def test_time_budget_stops_with_a_checkpoint_and_bf16_trains_fp32_weights(tmp_path):
    recipe = SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=2, batch_size=8, max_steps=50,
                          warmup_steps=0, train_limit=32, eval_limit=4, save_steps=100, logging_steps=1, ema_beta=0.0,
                          augment=False, max_seconds=0.0, bf16=True)
    summary = train_sudoku(recipe, tmp_path / "run", progress=False)
    assert summary["steps"] == 1  # the budget was spent after the first step: stop there, saved
    assert (tmp_path / "run" / "checkpoint-1" / "trainer_state.json").exists()
    model = type(build_model(recipe)).from_pretrained(tmp_path / "run" / "final")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    recipe.max_seconds = None
    recipe.max_steps = 3
    resumed = train_sudoku(recipe, tmp_path / "run", progress=False)
    assert resumed["resumed_from"].endswith("checkpoint-1") and resumed["steps"] == 3


def test_general_training_puzzles_are_cached_resumable_and_leak_free(tmp_path, monkeypatch):
    from jacobiscope.recipes import _sudoku_data
    from jacobiscope.recipes import sudoku as recipes

    monkeypatch.setattr(_sudoku_data, "GENERAL_PART_ROWS", 4)  # the module that reads it (parts of 4, not 1,000)
    recipe = SudokuRecipe(general_puzzles=10, general_givens=(30, 40), eval_limit=3)
    first = recipes.general_training_puzzles(recipe, tmp_path, progress=False)
    parts = sorted((tmp_path / "general").glob("part-*.csv.xz"))
    assert [p.name for p in parts] == ["part-00000.csv.xz", "part-00001.csv.xz", "part-00002.csv.xz"]
    assert len(first) == 10 and all(30 <= 81 - p.count("0") <= 40 for p in first["puzzle"])
    assert all(sudoku.count_solutions(p) == 1 for p in first["puzzle"][:3])
    # A lost part is regenerated identically (one seed per part); the others are read back, not regenerated.
    parts[1].unlink()
    stamp = parts[0].stat().st_mtime_ns
    again = recipes.general_training_puzzles(recipe, tmp_path, progress=False)
    assert list(again["puzzle"]) == list(first["puzzle"]) and parts[0].stat().st_mtime_ns == stamp
    report = json.loads((tmp_path / "general" / "leakage.json").read_text())
    assert report == {"generated": 10, "dropped": 0, "checked_against": ["SATNet test", "RRN test", "validation"]}
    # A part that holds an RRN test grid (digits relabelled) is caught and dropped.
    rrn = sudoku.rrn_test(limit=1)
    leaked_solution = rrn[0]["solution"].translate(str.maketrans("123456789", "234567891"))
    leaked_puzzle = "".join(s if p != "0" else "0" for p, s in zip(rrn[0]["puzzle"], leaked_solution))
    import lzma
    parts[2].write_bytes(lzma.compress(f"{leaked_puzzle},{leaked_solution}\n{first[9]['puzzle']},{first[9]['solution']}\n".encode()))
    cleaned = recipes.general_training_puzzles(recipe, tmp_path, progress=False)
    assert leaked_solution not in list(cleaned["solution"]) and len(cleaned) == 9
    assert json.loads((tmp_path / "general" / "leakage.json").read_text())["dropped"] == 1


def test_general_regime_trains_on_generated_and_satnet_rows(tmp_path):
    recipe = SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=2, batch_size=8, max_steps=2,
                          warmup_steps=0, train_limit=8, eval_limit=2, save_steps=2, logging_steps=1, ema_beta=0.0,
                          train_data="general", general_puzzles=6, general_givens=(36, 40))
    summary = train_sudoku(recipe, tmp_path / "run", progress=False)
    assert summary["steps"] == 2
    assert json.loads((tmp_path / "run" / "general" / "leakage.json").read_text())["generated"] == 6
    with pytest.raises(ValueError, match="train_data must be"):
        train_sudoku(SudokuRecipe(train_data="rrn", max_steps=1, eval_limit=2), tmp_path / "bad", progress=False)


def test_resumed_run_keeps_its_weight_average_and_skips_incomplete_checkpoints(tmp_path):
    from safetensors.torch import load_file

    def recipe(steps):
        return SudokuRecipe(arch="itrsa", hidden_size=16, num_heads=2, loops=2, batch_size=8, max_steps=steps,
                            warmup_steps=0, train_limit=32, eval_limit=4, save_steps=2, logging_steps=1,
                            ema_beta=0.5, ema_every=1, ema_start=1, augment=False)

    train_sudoku(recipe(4), tmp_path / "whole", progress=False)
    train_sudoku(recipe(2), tmp_path / "split", progress=False)
    # A save killed half-way leaves a newer folder that must not be trusted.
    broken = tmp_path / "split" / "checkpoint-3"
    broken.mkdir()
    (broken / "trainer_state.json").write_text('{"global_step": 3, "log_hist')
    resumed = train_sudoku(recipe(4), tmp_path / "split", progress=False)
    assert resumed["resumed_from"].endswith("checkpoint-2")
    whole = load_file(str(tmp_path / "whole" / "final_ema" / "model.safetensors"))
    split = load_file(str(tmp_path / "split" / "final_ema" / "model.safetensors"))
    raw = load_file(str(tmp_path / "whole" / "final" / "model.safetensors"))
    assert max(float((whole[k] - raw[k]).abs().max()) for k in whole) > 1e-4  # the average is not the raw weights
    assert max(float((whole[k] - split[k]).abs().max()) for k in whole) < 1e-5


def test_a_diverging_run_stops_with_its_last_finite_weights(tmp_path):
    """A loop without normalization, a large initialization and step size: the gradients overflow within a few
    steps. The run must stop there with the weights of the last finite step — the same weights as a run told to
    stop after that many steps — and a later call must report it, not resume into NaN."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    options = dict(arch="itrsa", hidden_size=16, num_heads=2, loops=8, norm="none", initializer_range=0.3,
                   learning_rate=0.3, batch_size=8, max_steps=12, save_steps=4, logging_steps=50, train_limit=64,
                   eval_limit=4, warmup_steps=0, augment=False, seed=0)
    summary = train_sudoku(SudokuRecipe(**options), tmp_path / "diverged", progress=False)
    record = summary["diverged"]
    assert summary["steps"] < options["max_steps"] and record["stopped_at"] == summary["steps"]
    assert (tmp_path / "diverged" / "diverged.json").is_file() and "non-finite" in record["why"]
    kept = load_file(str(tmp_path / "diverged" / "final" / "model.safetensors"))
    assert all(bool(torch.isfinite(value).all()) for value in kept.values())
    assert all(bool(torch.isfinite(v).all()) for v in load_file(str(tmp_path / "diverged" / "best" / "model.safetensors")).values())
    if record["step"] > 0:  # the independent reference: the same recipe stopped after that many steps
        train_sudoku(SudokuRecipe(**dict(options, max_steps=record["step"])), tmp_path / "short", progress=False)
        reference = load_file(str(tmp_path / "short" / "final" / "model.safetensors"))
        assert max(float((kept[k] - reference[k]).abs().max()) for k in kept) <= 1e-6
    again = train_sudoku(SudokuRecipe(**options), tmp_path / "diverged", progress=False)
    assert again["already_finished"] and again["diverged"] == record
