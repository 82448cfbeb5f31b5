"""Bad inputs to Sudoku training: recipe values, recipe files, run folders that are or hold an input, init_from
that would need the network, and a resumed run whose recipe changed. Each gets `RecipeError` (or the library's path
error) naming the problem and the fix before any work, or — for a change a resume can apply — is applied for real
and recorded. Real parts only: tiny real trainings, real files in tmp_path."""
import json
import lzma
import math
import shutil
import warnings
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import jacobiscope
from jacobiscope.errors import JacobiscopeError
from jacobiscope.recipes.sudoku import (
    MAX_GENERAL_PUZZLES, MAX_LOOPS, MAX_VALIDATION_PUZZLES, RECIPE_FIELDS, RecipeError, SudokuRecipe, build_model,
    init_from_folder, train_sudoku,
)

TINY = {"arch": "itrsa", "hidden_size": 8, "num_heads": 2, "loops": 2, "batch_size": 4, "learning_rate": 0.01,
        "max_steps": 2, "warmup_steps": 0, "save_steps": 2, "logging_steps": 1000, "train_limit": 16, "eval_limit": 2,
        "ema_beta": 0.5, "ema_every": 1, "ema_start": 1, "augment": False, "seed": 0}

S, L, H, I = (pytest.mark.guards(kind) for kind in ("silent", "lost", "hang", "internal"))


def _case(fields_, problem, fix, mark, id_):
    return pytest.param(fields_, problem, fix, id=id_, marks=mark)


# --------------------------------------------------------------------------------------------- recipe values
BAD_VALUES = [
    _case({"learning_rate": math.nan}, r"learning_rate must be a finite number in \(0, 10\], got nan", "within", S,
          "lr-nan"),
    _case({"learning_rate": math.inf}, r"learning_rate .* got inf", "set learning_rate", S, "lr-inf"),
    _case({"learning_rate": -1e-3}, r"learning_rate .* got -0.001", "set learning_rate", S, "lr-negative"),
    _case({"learning_rate": 0}, r"learning_rate .* got 0", "set learning_rate", S, "lr-zero"),
    _case({"learning_rate": "1e-3"}, r"learning_rate must be a number, got '1e-3'", "not a string", I, "lr-string"),
    _case({"batch_size": True}, r"batch_size must be an int, got True", "set batch_size to an int", S, "batch-bool"),
    _case({"batch_size": "64"}, r"batch_size must be an int, got '64'", "without quotes", I, "batch-string"),
    _case({"batch_size": 64.0}, r"batch_size must be an int, got 64.0", "without quotes or decimals", I,
          "batch-float"),
    _case({"batch_size": 0}, r"batch_size must be an int in \[1, ", "within that range", I, "batch-zero"),
    _case({"batch_size": 10**7}, r"batch_size must be at most 16384 \(the budget", "batch_size <= 16384", H,
          "batch-over-budget"),
    _case({"hidden_size": 30}, r"hidden_size=30 must be divisible by num_heads=8", r"e\.g\. 32", I, "hidden-heads"),
    _case({"hidden_size": 10**6}, r"hidden_size must be at most 8192", "hidden_size <= 8192", H, "hidden-huge"),
    _case({"num_heads": 0}, r"num_heads must be an int in \[1,", "within that range", I, "heads-zero"),
    _case({"loops": 0}, r"loops must be an int in \[1, 1024\], got 0", "within that range", I, "loops-zero"),
    _case({"loops": 10**9}, rf"loops must be at most {MAX_LOOPS} \(the budget: every training step",
          f"loops <= {MAX_LOOPS}", H, "loops-huge"),
    _case({"loops_min": 5, "loops_max": 3}, r"1 <= loops_min <= loops_max, got 5, 3", "swap them", I,
          "loops-range-swapped"),
    _case({"loops_max": 10**6}, r"loops_max must be at most 1024", "loops_max <= 1024", H, "loops-max-huge"),
    _case({"validation_loops": []}, r"validation_loops must be null or a list of 1 to 64", r"e\.g\. \[16, 32\]", S,
          "validation-loops-empty"),
    _case({"validation_loops": [16, 0]}, r"validation_loops\[1\] must be an int in \[1, 1024\], got 0",
          "within that range", I, "validation-loops-zero"),
    _case({"validation_loops": "16"}, r"validation_loops must be null or a list", r"e\.g\. \[16, 32\]", I,
          "validation-loops-string"),
    _case({"eval_limit": 0}, r"eval_limit must be an int in \[1, ", "within that range", I, "eval-limit-zero"),
    _case({"eval_limit": 10**6}, rf"eval_limit must be at most {MAX_VALIDATION_PUZZLES} \(the budget",
          f"eval_limit <= {MAX_VALIDATION_PUZZLES}", H, "eval-limit-huge"),
    _case({"general_puzzles": 10**9}, rf"general_puzzles must be at most {MAX_GENERAL_PUZZLES}",
          "or split the work", H, "general-puzzles-huge"),
    _case({"validation_givens": (45, 30)}, r"validation_givens must be \[low, high\] with low <= high",
          r"swap them: \[30, 45\]", I, "givens-swapped"),
    _case({"validation_givens": (5, 10)}, r"validation_givens\[0\] must be an int in \[22, 81\], got 5",
          "within that range", H, "givens-too-few-for-unique"),
    _case({"general_givens": [22]}, r"general_givens must be a pair \[low, high\]", r"e\.g\. \[31, 42\]", I,
          "general-givens-one"),
    _case({"seed": -1}, r"seed must be an int in \[0, 4294967295\], got -1", "within that range", I, "seed-negative"),
    _case({"seed": 2**32}, r"seed must be an int in \[0, 4294967295\], got 4294967296", "within that range", I,
          "seed-too-large"),
    _case({"seed": True}, r"seed must be an int, got True", "set seed to an int", S, "seed-bool"),
    _case({"seed": 1.5}, r"seed must be an int, got 1.5", "set seed to an int", S, "seed-float"),
    _case({"ema_beta": 1.0}, r"ema_beta must be a finite number in \[0, 1\), got 1.0", "within that range", S,
          "ema-beta-one"),
    _case({"ema_beta": -0.1}, r"ema_beta .* got -0.1", "within that range", S, "ema-beta-negative"),
    _case({"ema_every": 0}, r"ema_every must be an int in \[1,", "within that range", I, "ema-every-zero"),
    _case({"max_steps": 0}, r"max_steps must be an int in \[1, 1000000000\] or -1, got 0", r"-1: train for `epochs`",
          S, "max-steps-zero"),
    _case({"max_steps": -5}, r"max_steps .* or -1, got -5", "within that range", S, "max-steps-negative"),
    _case({"epochs": 0}, r"epochs must be a finite number in \(0, 1e\+06\], got 0", "within that range", S,
          "epochs-zero"),
    _case({"epochs": math.inf}, r"epochs .* got inf", "within that range", H, "epochs-inf"),
    _case({"warmup_steps": -1}, r"warmup_steps must be an int in \[0,", "within that range", I, "warmup-negative"),
    _case({"max_grad_norm": math.nan}, r"max_grad_norm .* got nan", "within that range", S, "grad-norm-nan"),
    _case({"weight_decay": -0.1}, r"weight_decay must be a finite number in \[0, 1\], got -0.1", "within that range",
          S, "weight-decay-negative"),
    _case({"save_steps": 0}, r"save_steps must be an int in \[1,", "within that range", I, "save-steps-zero"),
    _case({"logging_steps": -1}, r"logging_steps must be an int in \[1,", "within that range", I, "log-steps-neg"),
    _case({"max_seconds": -1}, r"max_seconds must be a finite number in \[0, 1e\+09\], got -1", "within that range",
          S, "max-seconds-negative"),
    _case({"max_seconds": math.nan}, r"max_seconds .* got nan", "within that range", S, "max-seconds-nan"),
    _case({"arch": "itrsaa"}, r"arch must be 'itrsa' or 'akorn', got 'itrsaa'", "did you mean 'itrsa'", I,
          "arch-typo"),
    _case({"norm": "RMSNorm"}, r"norm must be 'rmsnorm' or 'layernorm' or 'none', got 'RMSNorm'",
          "did you mean 'rmsnorm'", I, "norm-case"),
    _case({"train_data": "satnett"}, r"train_data must be 'satnet' or 'general'", "did you mean 'satnet'", S,
          "train-data-typo"),
    _case({"energy_reg": "e-single"}, r"energy_reg must be 'e_single' or 'e_multi' or None", "did you mean 'e_single'",
          S, "energy-reg-typo"),
    _case({"spec_reg_weight": -1.0}, r"spec_reg_weight must be a finite number in \[0, 1e\+06\]", "within that range",
          S, "spec-weight-negative"),
    _case({"augment": "yes"}, r"augment must be true or false, got 'yes'", "set augment to true or false", S,
          "augment-string"),
    _case({"bf16": 1}, r"bf16 must be true or false, got 1", "set bf16 to true or false", S, "bf16-int"),
    _case({"compile_loop": "yes"}, r"compile_loop must be true or false, got 'yes'", "set compile_loop to true or false",
          S, "compile-loop-string"),
    _case({"extra": []}, r"extra must be a dict \(free-form notes\), got \[\]", "set extra to", I, "extra-list"),
    _case({"extra": {"x": math.nan}}, r"extra must be a dict of JSON values", "drop what JSON cannot hold", I,
          "extra-nan"),
    _case({"train_limit": 0}, r"train_limit must be an int or null|train_limit must be an int in \[1,",
          "within that range", S, "train-limit-zero"),
    _case({"init_from": ""}, r"init_from must be null, a local model folder or a shipped checkpoint name, got ''",
          "save_pretrained", I, "init-from-empty"),
    _case({"mlp_ratio": -1}, r"mlp_ratio must be an int in \[0, 64\], got -1", "within that range", I,
          "mlp-ratio-negative"),
    _case({"arch": "akorn", "oscillator_dim": 3}, r"akorn needs an even oscillator_dim that divides hidden_size",
          r"e\.g\. oscillator_dim=4", I, "akorn-odd-oscillator"),
    _case({"arch": "akorn", "hidden_size": 24, "num_heads": 4}, r"hidden_size / num_heads to be a multiple of 4",
          "change hidden_size or num_heads", I, "akorn-rotary"),
    _case({"arch": "akorn", "energy_reg": "e_single", "energy_reg_weight": 0.1}, r"energy_reg='e_single' needs arch "
          "'itrsa'", "set energy_reg to null", I, "akorn-energy-reg"),
    _case({"energy_reg": "e_multi"}, r"energy_reg='e_multi' with energy_reg_weight=0.0 does nothing",
          "set both", S, "energy-reg-without-weight"),
    _case({"energy_reg_weight": 0.5}, r"energy_reg=None with energy_reg_weight=0.5 does nothing", "set both", S,
          "energy-weight-without-reg"),
    _case({"loops": 4, "loops_min": 6}, r"got 6, 4 \(loops_min=6, loops_max=None \(null: loops\), loops=4\)",
          "swap them", I, "loops-min-above-loops"),
    _case({"init_from": 123}, r"init_from must be null, a local model folder or a shipped checkpoint name, got 123",
          "save_pretrained", I, "init-from-int"),
    _case({"validation_givens": "31,42"}, r"validation_givens must be a pair \[low, high\]", r"e\.g\. \[31, 42\]", I,
          "givens-string"),
    _case({"report_to": ["tensorbord"]}, r"report_to must be names of transformers' reporting integrations, got "
          r"\['tensorbord'\]", r"did you mean 'tensorboard'\?", S, "report-to-typo"),
    _case({"report_to": [3]}, r"report_to must be a list of reporting integrations", r'e\.g\. \["tensorboard"\]', I,
          "report-to-not-names"),
    _case({"dynamics_every": 0}, r"dynamics_every must be an int in \[1, ", "set dynamics_every within that range", I,
          "dynamics-every-zero"),
]


@pytest.mark.parametrize("changed, problem, fix", BAD_VALUES)
def test_a_bad_recipe_value_is_refused_on_construction(changed, problem, fix):
    with pytest.raises(RecipeError, match=problem) as caught:
        SudokuRecipe(**changed)
    assert isinstance(caught.value, (JacobiscopeError, ValueError)) and " — " in str(caught.value)
    assert __import__("re").search(fix, str(caught.value).split(" — ", 1)[1]), str(caught.value)


@pytest.mark.guards("silent")
def test_every_recipe_field_is_declared_with_a_check_and_a_resume_policy():
    """A new SudokuRecipe field must say how it is checked and what a resume does with a changed value."""
    names = [item.name for item in fields(SudokuRecipe)]
    assert sorted(names) == sorted(RECIPE_FIELDS)
    assert {policy for _check, policy in RECIPE_FIELDS.values()} <= {"model", "start", "data", "restored", "apply", "call"}
    # the shipped example recipes still pass every check (a kept looped-LM run's with its own recipe class)
    from jacobiscope.recipes.looped_lm import LoopedLMRecipe

    for path in sorted(Path(__file__).parents[1].glob("examples/recipes/**/recipe.json")):
        is_looped_lm = "family" in json.loads(path.read_text())
        (LoopedLMRecipe if is_looped_lm else SudokuRecipe).from_json(path)


@pytest.mark.guards("silent")
def test_a_value_set_after_construction_is_checked_before_anything_is_written(tmp_path):
    recipe = SudokuRecipe(**TINY)
    recipe.learning_rate = float("nan")  # as the command line's overrides are set
    with pytest.raises(RecipeError, match=r"learning_rate .* got nan — set learning_rate"):
        train_sudoku(recipe, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------- recipe files
RECIPE_FILES = [
    pytest.param(b"{\"arch\": \"itrsa\",}", RecipeError, r"is not valid JSON \(line 1, column \d+", "fix the JSON",
                 id="trailing-comma", marks=I),
    pytest.param(b"", RecipeError, r"is not valid JSON", "fix the JSON", id="empty-file", marks=I),
    pytest.param(b"[1, 2]", RecipeError, r"holds a JSON list, not an object", r'write e\.g\. \{"arch"', id="list",
                 marks=I),
    pytest.param(b'{"learning_rat": 0.001}', RecipeError, r"unknown key\(s\) 'learning_rat'",
                 r"did you mean 'learning_rate'\?\) — fix the key", id="unknown-key-typo", marks=I),
    pytest.param(b'{"learning_rate": NaN}', RecipeError, r"learning_rate must be a finite number", "within", id="nan",
                 marks=S),
    pytest.param(b'{"batch_size": "64"}', RecipeError, r"batch_size must be an int, got '64'", "without quotes",
                 id="quoted-int", marks=I),
    pytest.param('{"arch": "itrsa", "note": "\u00e9"}'.encode("latin-1"), RecipeError, r"is not UTF-8 text",
                 "save it as UTF-8", id="latin-1", marks=I),
    pytest.param(b'{"max_steps": 1e400}', RecipeError, r"max_steps must be an int, got inf", "set max_steps", id="1e400",
                 marks=S),
]


@pytest.mark.parametrize("content, error, problem, fix", RECIPE_FILES)
def test_a_bad_recipe_file_is_refused_naming_the_file(tmp_path, content, error, problem, fix):
    path = tmp_path / "recipe.json"
    path.write_bytes(content)
    with pytest.raises(error, match=problem) as caught:
        SudokuRecipe.from_json(path)
    assert __import__("re").search(fix, str(caught.value)), str(caught.value)


@pytest.mark.guards("internal")
def test_a_recipe_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "recipe.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"arch": "akorn", "max_steps": 7}).encode())
    recipe = SudokuRecipe.from_json(path)
    assert recipe.arch == "akorn" and recipe.max_steps == 7


@pytest.mark.parametrize("kind", [pytest.param("folder", id="folder", marks=I),
                                  pytest.param("missing", id="missing", marks=I)])
def test_a_recipe_path_that_is_no_file_is_a_path_error(tmp_path, kind):
    from jacobiscope._io import PathError

    expected = IsADirectoryError if kind == "folder" else FileNotFoundError
    target = tmp_path if kind == "folder" else tmp_path / "nope.json"
    with pytest.raises(expected, match="is a folder, not a recipe file|does not exist — check the path") as caught:
        SudokuRecipe.from_json(target)
    assert isinstance(caught.value, PathError)


# --------------------------------------------------------------------------------------------- train_sudoku's call
def _path_error():
    from jacobiscope._io import PathError

    return PathError


@pytest.mark.parametrize("call, problem", [
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), tmp / "run", data_path=123),
                 r"data_path must be None or a path to satnet.csv.xz or its folder, got int — pass", id="data-int",
                 marks=I),
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), str(tmp / "run") + "\0x"),
                 r"contains a NUL character — pass a plain folder path", id="out-nul", marks=I),
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), tmp / "run" / ("r" * 300)),
                 r"is 300 characters, too long for the file system — use a name under 200", id="out-name-too-long",
                 marks=I),
    pytest.param(lambda tmp: train_sudoku(dict(TINY), tmp / "run"), r"expected a SudokuRecipe, got dict — pass "
                 r"SudokuRecipe\(\*\*fields\)", id="recipe-as-dict", marks=I),
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), tmp / "run", resume="no"),
                 r"resume must be True or False, got 'no' — pass resume=True", id="resume-string", marks=S),
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), None), r"expected a run folder path, got None — pass",
                 id="out-none", marks=I),
    pytest.param(lambda tmp: train_sudoku(SudokuRecipe(**TINY), "  "), r"expected a run folder path, got '  ' — pass",
                 id="out-blank", marks=I),
])
def test_a_bad_call_is_refused_before_any_folder_is_made(tmp_path, call, problem):
    with pytest.raises((RecipeError, _path_error()), match=problem):
        call(tmp_path)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------- outputs inside inputs
@pytest.fixture
def inputs(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "satnet.csv.xz").write_bytes(lzma.compress(b"not read before the refusal\n"))
    model = tmp_path / "start"
    build_model(SudokuRecipe(**TINY)).save_pretrained(model)
    return data, model


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where, problem", [
    pytest.param(lambda d, m: d, r"is the training data", id="out-is-data-folder", marks=L),
    pytest.param(lambda d, m: d / "runs" / "a", r"lies inside the training data", id="out-inside-data", marks=L),
    pytest.param(lambda d, m: m, r"is the init_from folder", id="out-is-init-from", marks=L),
    pytest.param(lambda d, m: m / "finetune", r"lies inside the init_from folder", id="out-inside-init-from", marks=L),
    pytest.param(lambda d, m: m.parent, r"holds the init_from folder", id="out-holds-init-from", marks=L),
])
def test_a_run_folder_that_is_or_holds_an_input_is_refused(inputs, where, problem):
    data, model = inputs
    before = {folder: _snapshot(folder) for folder in (data, model)}
    recipe = SudokuRecipe(**dict(TINY, init_from=str(model)))
    with pytest.raises(RecipeError, match=problem + r".*training would write over its own input — choose another "
                                                    r"run folder"):
        train_sudoku(recipe, where(data, model), data_path=data, progress=False)
    assert {folder: _snapshot(folder) for folder in (data, model)} == before


@pytest.mark.guards("lost")
def test_a_run_folder_reached_through_a_symlink_to_the_data_is_refused(inputs, tmp_path):
    data, _ = inputs
    (tmp_path / "link").symlink_to(data, target_is_directory=True)
    with pytest.raises(RecipeError, match="is the training data"):
        train_sudoku(SudokuRecipe(**TINY), tmp_path / "link", data_path=data, progress=False)
    assert [p.name for p in data.iterdir()] == ["satnet.csv.xz"]


@pytest.mark.guards("lost")
def test_a_run_folder_that_is_the_recipe_file_is_refused_and_the_file_kept(tmp_path):
    from jacobiscope._io import PathError

    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(TINY))
    with pytest.raises(PathError, match=r"is a file — give a folder path"):
        train_sudoku(SudokuRecipe.from_json(path), path, progress=False)
    assert json.loads(path.read_text()) == TINY


# --------------------------------------------------------------------------------------------- init_from stays offline
@pytest.mark.parametrize("name, problem, fix", [
    pytest.param("someone/some-sudoku-model", r"looks like a Hub repo id that is not in the local Hugging Face cache",
                 r"download it explicitly first", id="hub-id", marks=H),
    pytest.param("itrsa-sudok", r"neither a local model folder nor a shipped checkpoint",
                 r"did you mean 'itrsa-sudoku'\?", id="shipped-typo", marks=I),
])
def test_init_from_never_touches_the_network(no_network, monkeypatch, tmp_path, name, problem, fix):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    recipe = SudokuRecipe(**dict(TINY, init_from=name))
    for attempt in (lambda: train_sudoku(recipe, tmp_path / "run", progress=False), lambda: build_model(recipe)):
        with pytest.raises(RecipeError, match=problem + ".* — .*" + fix):
            attempt()
    assert no_network == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("make, problem", [
    pytest.param(lambda tmp: (tmp / "weights.safetensors").write_bytes(b"x") and tmp / "weights.safetensors",
                 r"init_from '.*weights.safetensors' is a file, not a model folder — set init_from to the folder",
                 id="a-file", marks=I),
    pytest.param(lambda tmp: tmp / "missing-run" / "best", r"neither a local model folder .* — check the path",
                 id="missing-folder", marks=I),
])
def test_init_from_that_is_no_model_folder_is_refused(tmp_path, make, problem):
    with pytest.raises(RecipeError, match=problem):
        init_from_folder(str(make(tmp_path)))


# --------------------------------------------------------------------------------------------- resume with a changed recipe
@pytest.fixture(scope="module")
def satnet(tmp_path_factory):
    """A SATNet-shaped file (10,000 rows made of 64 real ones): quick to read for each tiny run."""
    from jacobiscope.data import sudoku

    train, _ = sudoku.satnet_splits(limit=64)
    rows = [f"{p},{s}\n" for p, s in zip(train["puzzle"], train["solution"])]
    folder = tmp_path_factory.mktemp("satnet")
    (folder / "satnet.csv.xz").write_bytes(lzma.compress("".join(rows[i % 64] for i in range(10_000)).encode()))
    return folder


def _train(recipe_fields, out, satnet, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train_sudoku(SudokuRecipe(**recipe_fields), out, data_path=satnet, progress=False, **kwargs)
    return summary, [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def trained(satnet, tmp_path_factory):
    """A finished two-step run (one checkpoint, its validation, best/)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    _train(TINY, out, satnet)
    return out


@pytest.fixture
def run(trained, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    return out


REFUSED_CHANGES = [
    pytest.param({"hidden_size": 16}, r"hidden_size: recorded 8, now 16 \(the checkpoint's weights were trained",
                 "set hidden_size=8 back to resume", id="hidden-size", marks=S),
    pytest.param({"arch": "akorn", "hidden_size": 8, "num_heads": 2}, r"arch: recorded 'itrsa', now 'akorn'",
                 "set arch='itrsa' back", id="arch", marks=S),
    pytest.param({"norm": "layernorm"}, r"norm: recorded 'rmsnorm', now 'layernorm'", "set norm='rmsnorm' back",
                 id="norm", marks=S),
    pytest.param({"seed": 3}, r"seed: recorded 0, now 3 \(it is read only when a run starts", "set seed=0 back",
                 id="seed", marks=S),
    pytest.param({"batch_size": 8}, r"batch_size: recorded 4, now 8 \(the resumed position in the epoch counts",
                 "set batch_size=4 back", id="batch-size", marks=S),
    pytest.param({"augment": True}, r"augment: recorded False, now True", "set augment=False back", id="augment",
                 marks=S),
    pytest.param({"weight_decay": 0.1}, r"weight_decay: recorded 0.0, now 0.1 \(the optimizer state restored",
                 "set weight_decay=0.0 back", id="weight-decay", marks=S),
    pytest.param({"ema_beta": 0.0}, r"ema_beta: recorded 0.5, now 0.0 \(its checkpoints hold no weight average",
                 "set ema_beta=0.5 back", id="ema-off", marks=S),
    pytest.param({"init_from": "itrsa-sudoku"}, r"init_from: recorded None, now 'itrsa-sudoku'",
                 "set init_from=None back", id="init-from", marks=S),
    pytest.param({"hidden_size": 16, "seed": 4}, r"hidden_size: recorded 8, now 16 .*; seed: recorded 0, now 4",
                 "set hidden_size=8, seed=0 back", id="two-fields", marks=S),
]


@pytest.mark.parametrize("changed, problem, fix", REFUSED_CHANGES)
def test_a_change_a_resume_cannot_apply_is_refused_and_nothing_is_rewritten(run, satnet, changed, problem, fix):
    recorded = (run / "recipe.json").read_bytes()
    files = _snapshot(run)
    with pytest.raises(RecipeError, match=r"cannot resume checkpoint-2 of .* with a changed recipe: " + problem) as caught:
        _train(dict(TINY, max_steps=4, **changed), run, satnet)
    assert fix in str(caught.value) and "resume=False (--no-resume) or another run folder (--out)" in str(caught.value)
    assert (run / "recipe.json").read_bytes() == recorded
    assert {k: v for k, v in _snapshot(run).items() if k != ".jacobiscope.lock"} == {
        k: v for k, v in files.items() if k != ".jacobiscope.lock"}


@pytest.mark.guards("silent")
def test_max_steps_below_the_reached_step_is_refused(run, satnet):
    with pytest.raises(RecipeError, match=r"max_steps=1 is below step 2, which .* has already reached \(checkpoint-2\)"
                                          r": its weights cannot go back — set max_steps >= 2"):
        _train(dict(TINY, max_steps=1), run, satnet)
    assert json.loads((run / "recipe.json").read_text())["max_steps"] == 2


@pytest.mark.guards("lost")
def test_an_unreadable_recorded_recipe_is_refused_not_overwritten(run, satnet):
    (run / "recipe.json").write_text('{"arch": "itr')
    with pytest.raises(RecipeError, match=r"recipe.json \(the recipe this run was trained with\) is unreadable .* — "
                                          "restore it, or start a new run"):
        _train(dict(TINY, max_steps=4), run, satnet)
    assert (run / "recipe.json").read_text() == '{"arch": "itr'


@pytest.mark.guards("silent")
def test_a_finished_run_reports_a_changed_recipe_as_not_applied(run, satnet):
    summary, said = _train(dict(TINY, eval_limit=3), run, satnet)
    assert summary["already_finished"]
    assert summary["recipe_changes_not_applied"] == [{"field": "eval_limit", "old": 2, "new": 3}]
    assert any("was not applied — raise max_steps to continue" in text for text in said)
    assert json.loads((run / "recipe.json").read_text())["eval_limit"] == 2


@pytest.mark.guards("silent")
def test_applicable_changes_are_applied_for_real_and_recorded_offline(run, satnet, no_network, monkeypatch):
    """max_steps, the learning rate, the save interval and the validation puzzles change on resume: the optimizer
    trains with the new rate (read back from its saved state), saves land at the new interval, best/ is chosen among
    scores on the new puzzles, and recipe_changes.json records it all. The network stays untouched throughout."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    changed = dict(TINY, max_steps=6, learning_rate=0.05, save_steps=3, eval_limit=3)
    summary, said = _train(changed, run, satnet)
    assert no_network == []
    assert summary["steps"] == 6 and {c["field"] for c in summary["recipe_changes"]} == {
        "max_steps", "learning_rate", "save_steps", "eval_limit"}
    assert any("resuming checkpoint-2 with a changed recipe" in text for text in said)
    assert (run / "checkpoint-3").is_dir() and not (run / "checkpoint-4").exists()  # the new interval
    optimizer = torch.load(run / "checkpoint-6" / "optimizer.pt", weights_only=True)
    assert [group["lr"] for group in optimizer["param_groups"]] == [0.05] * len(optimizer["param_groups"])
    log = json.loads((run / "recipe_changes.json").read_text())
    assert {entry["field"]: (entry["old"], entry["new"], entry["from_step"]) for entry in log}["learning_rate"] == (
        0.01, 0.05, 2)
    assert json.loads((run / "recipe.json").read_text())["learning_rate"] == 0.05
    history = json.loads((run / "accuracy_history.json").read_text())
    new = [entry for entry in history if entry.get("validation", {}).get("eval_limit") == 3]
    assert [entry["step"] for entry in new] == [2, 3, 6]  # the starting point is scored again on the new puzzles
    marker = json.loads((run / "best" / "accuracy.json").read_text())
    assert marker["validation"]["eval_limit"] == 3
    assert marker["step"] == max(new, key=lambda e: (e["validation_board_accuracy"], e["validation_cell_accuracy"]))[
        "step"]


@pytest.mark.guards("silent")
def test_a_new_time_budget_is_not_a_recipe_change(run, satnet):
    """max_seconds is each call's wall-clock budget: a resume with another one trains on without a warning and
    without an entry in recipe_changes.json, while a real change beside it is still recorded."""
    summary, said = _train(dict(TINY, max_steps=3, max_seconds=12345.6), run, satnet)
    assert summary["steps"] == 3
    assert [c["field"] for c in summary["recipe_changes"]] == ["max_steps"]
    assert [entry["field"] for entry in json.loads((run / "recipe_changes.json").read_text())] == ["max_steps"]
    assert not any("max_seconds" in text for text in said)


@pytest.mark.guards("lost")
def test_starting_over_keeps_the_previous_run_instead_of_mixing_or_deleting_it(run, satnet):
    old = _snapshot(run / "checkpoint-2")
    summary, said = _train(dict(TINY, max_steps=1, save_steps=1), run, satnet, resume=False)
    assert summary["steps"] == 1 and summary["resumed_from"] is None
    (archive,) = (run / "previous-runs").iterdir()
    assert _snapshot(archive / "checkpoint-2") == old and (archive / "best" / "model.safetensors").is_file()
    assert not (run / "checkpoint-2").exists()  # a later resume cannot pick the old run's checkpoint
    assert any("moved to" in text and "training starts over" in text for text in said)


# --------------------------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("argv, problem", [
    pytest.param(b'{"learning_rate": NaN}', r"learning_rate must be a finite number .* got nan", id="bom-and-nan",
                 marks=I),
    pytest.param(b'{"max_step": 10}', r"unknown key\(s\) 'max_step' \(did you mean 'max_steps'\?\)", id="key-typo",
                 marks=I),
])
def test_the_command_line_says_one_line_and_exits_2(tmp_path, capsys, satnet, argv, problem):
    from jacobiscope.cli import main

    config = tmp_path / "recipe.json"
    config.write_bytes(b"\xef\xbb\xbf" + argv)  # a byte-order mark, as some editors write
    argv = ["--config", str(config)]
    code = main(["sudoku", "train", "--out", str(tmp_path / "run"), "--data", str(satnet), "--quiet", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "internal error" not in err, err
    assert __import__("re").search(problem, err), err
    assert not (tmp_path / "run" / "recipe.json").exists()


# --------------------------------------------------------------------------------------------- regularizer options
@pytest.mark.parametrize("options, problem, fix", [
    pytest.param({"spec_reg_weight": True}, r"spec_reg_weight must be a finite number >= 0, got True",
                 r"spec_reg_weight=0\.01", id="weight-bool", marks=S),
    pytest.param({"jacobian_reg_weight": math.nan}, r"jacobian_reg_weight must be a finite number >= 0, got nan",
                 "0 turns it off", id="weight-nan", marks=S),
    pytest.param({"jacobian_reg_target": math.inf}, r"jacobian_reg_target must be a finite number >= 0, got inf",
                 "the spectral norm aimed at", id="target-inf", marks=S),
    pytest.param({"spec_reg_target_modules": "q_proj"}, r"spec_reg_target_modules must be None or a non-empty list",
                 r"a single name in a list", id="modules-string", marks=S),
    pytest.param({"jacobian_reg_layers": [-1]}, r"jacobian_reg_layers must be None or a non-empty list of block "
                 r"indices >= 0, got \[-1\]", r"e\.g\. \[0, 3\]", id="layers-negative", marks=I),
    pytest.param({"jacobian_reg_max_loops": 10**7}, r"jacobian_reg_max_loops=10000000 is over the budget of 4096",
                 "pass a smaller value", id="max-loops-huge", marks=H),
    pytest.param({"spec_reg_exact": "yes"}, r"spec_reg_exact must be True or False, got 'yes'",
                 "spec_reg_exact=True or", id="exact-string", marks=S),
    pytest.param({"jacobian_reg_every": 0}, r"jacobian_reg_every must be a positive int, got 0", "pass an int >= 1",
                 id="every-zero", marks=I),
])
def test_a_bad_regularizer_option_is_refused_when_the_arguments_are_made(tmp_path, options, problem, fix):
    from jacobiscope.training import SpectralRegTrainingArguments

    with pytest.raises(jacobiscope.errors.ArgumentError, match=problem) as caught:
        SpectralRegTrainingArguments(str(tmp_path), report_to=[], use_cpu=True, **options)
    assert __import__("re").search(fix, str(caught.value).split(" — ", 1)[1]), str(caught.value)


@pytest.mark.parametrize("options, problem", [
    pytest.param({"steps": 0}, r"steps must be a positive int, got 0 — pass an int >= 1", id="steps-zero", marks=I),
    pytest.param({"k": True}, r"k must be a positive int, got True", id="k-bool", marks=S),
    pytest.param({"transient": -1}, r"transient must be a non-negative int, got -1", id="transient-negative", marks=I),
    pytest.param({"dtype": "float64"}, r"dtype must be a floating torch.dtype, got 'float64' — pass "
                 r"dtype=torch\.float64", id="dtype-string", marks=I),
])
def test_a_bad_lyapunov_callback_option_is_refused_before_training(options, problem):
    """Checked when the callback is made, not at the first evaluation, hours into a run."""
    from jacobiscope.training import LyapunovCallback

    with pytest.raises(jacobiscope.errors.ArgumentError, match=problem):
        LyapunovCallback(torch.zeros(1, 81, dtype=torch.long), **options)


@pytest.mark.guards("silent")
def test_a_weight_average_that_never_starts_is_said(tmp_path):
    """ema_start at or after max_steps leaves final_ema/ at the starting weights: a warning says so, with the fix."""
    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    recipe = SudokuRecipe(**{**TINY, "max_steps": 1, "ema_beta": 0.9, "ema_start": 5})
    with pytest.warns(UserWarning, match=r"ema_start=5 is at or after max_steps=1.* — lower ema_start"):
        train_sudoku(recipe, tmp_path / "run", progress=False)
