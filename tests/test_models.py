import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.data import sudoku as data
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

PUZZLE = "004300209005009001070060043006002087190007400050083000600000105003508690042910300"
SOLUTION = "864371259325849761971265843436192587198657432257483916689734125713528694542916378"


def _tiny(arch, **overrides):
    torch.manual_seed(0)
    if arch == "itrsa":
        return ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3, **overrides)).eval()
    return AKOrNForSudoku(AKOrNConfig(hidden_size=16, num_heads=2, oscillator_dim=4, loops=3, **overrides)).eval()


def _puzzles(n=3):
    train, _ = data.satnet_splits(limit=None)
    return data.to_tensor(list(train.select(range(n))["puzzle"]))


@pytest.mark.parametrize("arch", ["itrsa", "akorn"])
def test_save_load_round_trip_through_automodel(arch, tmp_path):
    model = _tiny(arch)
    puzzles = _puzzles()
    generator = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    kwargs = {"generator": generator()} if arch == "akorn" else {}
    before = model(puzzles, **kwargs).logits
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = transformers.AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is type(model)
    kwargs = {"generator": generator()} if arch == "akorn" else {}
    assert torch.equal(loaded(puzzles, **kwargs).logits, before)


@pytest.mark.parametrize("arch", ["itrsa", "akorn"])
def test_loop_map_step_is_the_models_own_loop(arch):
    model = _tiny(arch).double()
    puzzles = _puzzles()
    looped = model.loop_map(puzzles, **({"seed": 5} if arch == "akorn" else {}))
    kwargs = {"generator": torch.Generator().manual_seed(5)} if arch == "akorn" else {}
    with torch.no_grad():
        out = model(puzzles, loops=3, return_states=True, return_energies=True, **kwargs)
        assert torch.allclose(looped.x0, out.states[0])
        for t in range(3):
            assert torch.allclose(looped(out.states[t]), out.states[t + 1], atol=1e-12)
    energies = jacobiscope.pseudo_energy(out.states[:3], looped)  # [loops, N]
    assert torch.allclose(energies.T, out.energies, atol=1e-9)


@pytest.mark.parametrize("arch", ["itrsa", "akorn"])
def test_loop_map_jacobian_matches_dense_autograd(arch):
    model = _tiny(arch).double()
    puzzles = _puzzles(1)
    looped = model.loop_map(puzzles)
    injection = model.injection(puzzles)
    expected = torch.autograd.functional.jacobian(lambda x: model.step(x, injection), looped.x0)
    expected = expected.reshape(looped.x0.numel(), looped.x0.numel())
    assert torch.allclose(jacobiscope.jacobian(looped)[0], expected, atol=1e-10)
    sigma = jacobiscope.spectral_norm(looped)
    assert abs(float(sigma.value[0]) - float(torch.linalg.matrix_norm(expected, 2))) < 1e-8


def test_akorn_state_stays_on_the_oscillator_spheres():
    model = _tiny("akorn")
    out = model(_puzzles(), loops=4, return_states=True)
    norms = out.states.reshape(5, 3, 81, 4, 4).norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)


def test_akorn_start_state_of_one_seed_is_the_same_in_float64():
    """A float64 copy of the model (as cards measure dynamics) starts where the float32 model starts: the blanks'
    noise is drawn in float32 from the seed whatever the dtype, then cast."""
    import copy

    model = _tiny("akorn")
    start32 = model.loop_map(_puzzles(), seed=5).x0
    start64 = copy.deepcopy(model).to(torch.float64).loop_map(_puzzles(), seed=5).x0
    assert start64.dtype == torch.float64
    assert (start64 - start32.double()).abs().max() < 1e-6
    assert (model.loop_map(_puzzles(), seed=6).x0 - start32).abs().max() > 0.1   # another seed, another start


@pytest.mark.parametrize("attention", ["standard", "e_single", "e_multi"])
def test_a_cell_that_may_not_attend_to_itself_mixes_only_the_others(attention):
    """attend_self=False: the attention output is the softmax over the other cells only, computed here from the
    weights by hand; with W_K = W_Q (e_multi) the masked scores stay symmetric (the variant still admits an energy)."""
    import math

    model = _tiny("itrsa", attention=attention, attend_self=False)
    block = model.attention if hasattr(model, "attention") else next(
        m for m in model.modules() if type(m).__name__ == "_LoopedAttention")
    x = torch.randn(2, 81, 16)
    heads = block.heads
    q = (x @ block.query.weight.T).reshape(2, 81, heads, -1).transpose(1, 2)
    k = q if attention == "e_multi" else (x @ block.key.weight.T).reshape(2, 81, heads, -1).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(16 // heads)
    scores = scores.masked_fill(torch.eye(81, dtype=torch.bool), float("-inf"))
    weights = torch.softmax(scores, -1)
    if attention == "standard":
        values = (x @ block.value.weight.T).reshape(2, 81, heads, -1).transpose(1, 2)
        expected = (weights @ values).transpose(1, 2).reshape(2, 81, 16) @ block.output.weight.T
    elif attention == "e_single":
        expected = weights[:, 0] @ (x @ block.value_matrix())
    else:
        expected = torch.stack([weights[:, h] @ (x @ block.value_matrix()[h]) for h in range(heads)], 1).mean(1)
        finite = scores.masked_fill(torch.eye(81, dtype=torch.bool), 0.0)
        assert torch.allclose(finite, finite.transpose(-1, -2), atol=1e-6)
    with torch.no_grad():
        got = block(x)
        assert (got - expected).abs().max() < 1e-5
        block.attend_self = True   # the same weights attending to themselves too: another output
        assert (block(x) - got).abs().max() > 1e-4
    assert torch.all(weights.diagonal(dim1=-2, dim2=-1) == 0)


def test_energy_voting_keeps_the_lowest_energy_draw():
    model = _tiny("akorn")
    puzzle = data.to_tensor([PUZZLE])
    voted = model.solve(puzzle, loops=3, votes=4, seed=7)
    # independent re-run of the four draws with the same generator stream
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        out = model(puzzle.repeat(4, 1), loops=3, return_energies=True, generator=generator)
    best = int(out.energies.sum(1).argmin())
    digits = out.logits.argmax(-1)[best] + 1
    assert torch.equal(voted[0], torch.where(puzzle[0] > 0, puzzle[0], digits))


def test_energy_constrained_itrsa_variants():
    single = _tiny("itrsa", attention="e_single")
    V = single.attention.value_matrix()
    qk = single.attention.key.weight.T @ single.attention.query.weight
    assert torch.allclose(V, V.T) and torch.allclose(V, 0.5 * (qk + qk.T))
    multi = _tiny("itrsa", attention="e_multi")
    Vh = multi.attention.value_matrix()
    assert Vh.shape == (2, 16, 16) and torch.allclose(Vh, Vh.transpose(1, 2))
    for model in (single, multi):
        assert model(_puzzles()).logits.shape == (3, 81, 9)


def test_solve_keeps_givens_and_accepts_strings():
    model = _tiny("itrsa")
    grid = model.solve([PUZZLE, PUZZLE.replace("0", ".")], loops=2)
    given = data.to_tensor([PUZZLE])[0] > 0
    assert grid.shape == (2, 81) and torch.equal(grid[0][given], data.to_tensor([PUZZLE])[0][given])
    assert torch.equal(grid[0], grid[1])
    assert int(grid.min()) >= 1 and int(grid.max()) <= 9


def test_bad_puzzles_are_refused():
    model = _tiny("itrsa")
    with pytest.raises(ValueError, match="81 characters"):
        model.solve(PUZZLE[:80])
    with pytest.raises(ValueError, match="81 characters"):
        model.solve(PUZZLE[:80] + "x")
    with pytest.raises(ValueError, match=r"digits 0-9, got values in \[10, 10\]"):
        model.solve(torch.full((1, 81), 10))
    contradictory = "11" + PUZZLE[2:]
    with pytest.raises(ValueError, match="contradictory: digit 1 appears twice in row 1"):
        model.solve(contradictory)
    with pytest.raises(ValueError, match="votes must be 1"):
        model.solve(PUZZLE, votes=3)


def test_a_short_real_training_run_lowers_the_loss_and_resumes(tmp_path):
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    recipe = SudokuRecipe(arch="itrsa", hidden_size=32, num_heads=4, loops=3, batch_size=32, learning_rate=3e-3,
                          max_steps=30, warmup_steps=0, train_limit=256, eval_limit=20, save_steps=15,
                          logging_steps=5, ema_start=5, ema_every=5, augment=False)
    summary = train_sudoku(recipe, tmp_path / "run")
    history = __import__("json").loads((tmp_path / "run" / "checkpoint-30" / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    assert losses[-1] < losses[0] - 0.1
    assert (tmp_path / "run" / "checkpoint-30" / "ema.safetensors").exists()
    assert (tmp_path / "run" / "best" / "model.safetensors").exists()
    recipe.max_steps = 35
    resumed = train_sudoku(recipe, tmp_path / "run")
    assert resumed["resumed_from"].endswith("checkpoint-30") and resumed["steps"] == 35


def test_a_recipe_fine_tunes_saved_weights_with_a_regularizer(tmp_path):
    import json

    from jacobiscope.recipes.sudoku import SudokuRecipe, build_model, train_sudoku
    from jacobiscope.training import spectral_penalty

    start = _tiny("itrsa")
    start.save_pretrained(tmp_path / "start")
    config = start.config
    recipe = SudokuRecipe(arch="itrsa", hidden_size=config.hidden_size, num_heads=config.num_heads, loops=2,
                          initializer_range=config.initializer_range, batch_size=16, learning_rate=1e-2,
                          max_steps=12, warmup_steps=0, train_limit=64, eval_limit=8, save_steps=12, logging_steps=4,
                          ema_beta=0.0, augment=False, init_from=str(tmp_path / "start"), spec_reg_weight=1.0)
    built = build_model(recipe)
    for name, value in start.state_dict().items():  # starts from the saved weights, not a fresh init
        assert torch.equal(built.state_dict()[name], value), name
    assert built.config.loops == 2
    train_sudoku(recipe, tmp_path / "run")
    history = json.loads((tmp_path / "run" / "checkpoint-12" / "trainer_state.json").read_text())["log_history"]
    assert any("spec_penalty" in entry and "spec_sigma_max" in entry for entry in history)
    tuned = type(start).from_pretrained(tmp_path / "run" / "final")
    # a strong spectral penalty (weight 1, lr 1e-2) must pull sigma_max(W) towards 1: R_spec falls
    assert float(spectral_penalty(tuned).detach()) < float(spectral_penalty(start).detach())

    with pytest.raises(ValueError, match="differs from the recipe in"):
        build_model(SudokuRecipe(arch="itrsa", hidden_size=2 * config.hidden_size, init_from=str(tmp_path / "start")))
    with pytest.raises(ValueError, match="recipe's arch is 'akorn'"):
        build_model(SudokuRecipe(arch="akorn", init_from=str(tmp_path / "start")))


def test_cli_eval_reports_accuracy_per_loop_count(tmp_path):
    import json

    from jacobiscope.cli import main

    model = _tiny("itrsa")
    model.save_pretrained(tmp_path / "model")
    record_path = tmp_path / "eval.json"
    assert main(["sudoku", "eval", str(tmp_path / "model"), "--loops", "1,2", "--split", "id", "--limit", "20",
                 "--json", str(record_path)]) == 0
    record = json.loads(record_path.read_text())
    assert [r["index"] for r in record["puzzles"]["id"]] == list(range(20))  # per-puzzle rows in the JSON
    _, test = data.satnet_splits()
    rows = test.select(range(20))
    puzzles, solutions = data.to_tensor(list(rows["puzzle"])), data.to_tensor(list(rows["solution"]))
    for loops in (1, 2):
        expected = data.cell_accuracy(model.solve(puzzles, loops=loops), puzzles, solutions)
        assert record["results"]["id"][str(loops)]["cell_accuracy"] == pytest.approx(expected)


def test_cli_eval_keeps_csv_splits_of_one_name_apart_and_scores_boards_without_blanks(tmp_path, capsys):
    import json

    from jacobiscope.cli import main

    model = _tiny("itrsa")
    model.save_pretrained(tmp_path / "model")
    _, test = data.satnet_splits()
    rows = test.select(range(3))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "test.csv").write_text("".join(f"{p},{s}\n" for p, s in zip(rows["puzzle"], rows["solution"])))
    # a board with every cell given: nothing to predict, so the board counts as solved and cell accuracy is undefined
    (tmp_path / "b" / "test.csv").write_text(f"{rows['solution'][0]},{rows['solution'][0]}\n")
    record_path = tmp_path / "eval.json"
    assert main(["sudoku", "eval", str(tmp_path / "model"), "--loops", "1", "--quiet", "--json", str(record_path),
                 "--split", f"{tmp_path / 'a' / 'test.csv'},{tmp_path / 'b' / 'test.csv'}"]) == 0
    record = json.loads(record_path.read_text())  # strict JSON: NaN would not parse in other languages' readers
    assert sorted(record["results"]) == sorted(["test.csv", str(tmp_path / "b" / "test.csv")])
    assert len(record["puzzles"]["test.csv"]) == 3 and len(record["puzzles"][str(tmp_path / "b" / "test.csv")]) == 1
    full = record["results"][str(tmp_path / "b" / "test.csv")]["1"]
    assert full["board_accuracy"] == 1.0 and full["cell_accuracy"] is None
    out = capsys.readouterr().out
    assert "no blank cells, so cell accuracy is undefined" in out and "nan" not in out


def test_akorn_unit_embeddings_add_row_column_and_box():
    model = _tiny("akorn", unit_embeddings=True)
    puzzles = _puzzles(1)
    c = model.injection(puzzles)[0]
    cell = 40  # row 4, column 4, box 4 (the centre)
    expected = model.embed(puzzles[0, cell]) + model.unit_embed.weight[4] + model.unit_embed.weight[13] + model.unit_embed.weight[22]
    assert torch.allclose(c[cell], expected)


@pytest.mark.parametrize("arch, kwargs", [("itrsa", {}), ("akorn", {}), ("akorn", {"votes": 3})])
def test_solve_along_equals_solve_at_every_loop_count(arch, kwargs):
    model = _tiny(arch)
    puzzles = _puzzles(7)
    along = model.solve_along(puzzles, loops=[5, 1, 4, 4], batch_size=4, **kwargs)
    assert sorted(along) == [1, 4, 5]
    for loops in (1, 4, 5):  # odd and even: one trajectory, read out on the way
        assert torch.equal(along[loops], model.solve(puzzles, loops=loops, batch_size=4, **kwargs))
    with pytest.raises(ValueError, match="positive ints"):
        model.solve_along(puzzles, loops=[0, 3])


@pytest.mark.parametrize("arch", ["itrsa", "akorn"])
def test_loop_outcome_says_whether_the_grid_is_a_solution(arch):
    model = _tiny(arch)
    puzzles = _puzzles(3)
    outcomes = model.loop_outcome(puzzles, loops=2)
    grids = model.solve(puzzles, loops=2)
    assert [o["solved"] for o in outcomes] == [bool(data.is_valid_solution(g)) for g in grids]
    assert [o["givens"] for o in outcomes] == (puzzles > 0).sum(1).tolist()
    # A grid that is the solution counts as solved whatever the model does: check the validity test itself.
    from jacobiscope.models.itrsa.modeling_itrsa import _is_solution

    train, _ = data.satnet_splits(limit=2)
    solutions = data.to_tensor(list(train["solution"]))
    broken = solutions.clone()
    broken[0, [0, 1]] = broken[0, [1, 0]]
    assert _is_solution(solutions).tolist() == [True, True] and _is_solution(broken).tolist() == [False, True]


@pytest.mark.parametrize("arch", ["itrsa", "akorn"])
def test_deep_supervision_loss_is_the_mean_over_readouts(arch):
    model = _tiny(arch)
    puzzles = _puzzles(2)
    train, _ = data.satnet_splits(limit=2)
    labels = data.to_tensor(list(train["solution"]))
    noise = torch.randn(2, 81, 16) if arch == "akorn" else None
    extra = {"noise": noise} if arch == "akorn" else {}
    out = model(puzzles, labels=labels, loops=7, supervise_every=3, return_states=True, **extra)
    read = (lambda x: model.readout(model.head_norm(x))) if arch == "itrsa" else model.read
    expected = torch.stack([torch.nn.functional.cross_entropy(read(out.states[t]).reshape(-1, 9), labels.reshape(-1) - 1)
                            for t in (3, 6, 7)]).mean()
    assert torch.allclose(out.loss, expected, atol=1e-6)
    plain = model(puzzles, labels=labels, loops=7, **extra).loss
    final = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 9), labels.reshape(-1) - 1)
    assert torch.allclose(plain, final, atol=1e-6)
