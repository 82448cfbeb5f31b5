"""``jacobiscope tasks list`` and ``jacobiscope tasks eval``: the table and JSON are the Python API's numbers on a
real saved checkpoint folder (a tiny random Dory with the tasks' tokenizer); every bad argument is one line and exit
status 2, checked before the weights are read (a folder whose weights are corrupt still gets the argument's error)."""
import json
import re

import pytest
import torch
import transformers

from jacobiscope.cli import main
from jacobiscope.data.tasks import get_task, list_tasks, task_tokenizer
from jacobiscope.recipes._looped_lm_eval import evaluate_task

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")


def tiny_dory():
    torch.manual_seed(0)
    return transformers.DoryForCausalLM(transformers.DoryConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, n_input_layers=1, n_recurrent_layers=2, n_output_layers=1,
        n_recurrent_loops=2)).eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A looped LM folder, the same with corrupt weights, one without a tokenizer, and a non-looped LM."""
    root = tmp_path_factory.mktemp("models")
    model, tokenizer = tiny_dory(), task_tokenizer()
    for name in ("dory", "corrupt", "no-tokenizer"):
        model.save_pretrained(root / name)
    for name in ("dory", "corrupt", "llama"):
        tokenizer.save_pretrained(root / name)
    weights = root / "corrupt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32,
                                                           num_hidden_layers=1, num_attention_heads=2)
                                  ).save_pretrained(root / "llama")
    return root


def user_error(argv, capsys, *fragments):
    status = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and ONE_LINE.match(lines[0]) and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_tasks_list_names_every_task_its_levels_and_a_solved_example(capsys):
    assert main(["tasks", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in list_tasks():
        task = get_task(name)
        row = next(line for line in lines if line.startswith(name + " "))
        _, train, harder, text = row.split(maxsplit=3)
        assert [int(v) for v in train.split("-")] == list(task.train_levels)
        assert [int(v) for v in harder.split("-")] == list(task.harder_levels)
        example = task.generate(1, seed=0)[0]
        assert text == example.prompt + example.answer and task.solve(example.prompt) == example.answer


def test_tasks_eval_prints_and_writes_the_python_apis_numbers(folders, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["tasks", "eval", str(folders / "dory"), "--task", "reachability", "--loops", "3,1-2", "--n", "12",
            "--levels", "2-5", "--seed", "7", "--batch-size", "5", "--out", "eval.json", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "eval.json").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(folders / "dory")
    expected = evaluate_task(model, "reachability", loops=(1, 2, 3), n=12, levels=(2, 5), seed=7,
                             tokenizer=task_tokenizer())
    assert record["puzzles"]["reachability"] == expected.records
    assert record["loops"] == [1, 2, 3] and record["levels"] == [2, 5] and record["configured"] == 2
    assert {k: v["accuracy"] for k, v in record["results"]["reachability"].items()} == {
        str(k): v for k, v in expected.accuracy.items()}
    assert record["model"] == "dory"  # its name, never an absolute path
    table = [line.split() for line in out.splitlines()]
    assert table[0][:2] == ["loops", "exact"] and [row[0] for row in table[1:4]] == ["1", "2*", "3"]
    assert float(table[3][1].rstrip("%")) == pytest.approx(100 * expected.accuracy[3], abs=0.05)
    assert "per-instance records written to eval.json" in out


@pytest.mark.parametrize("options, fragments", [
    (["--task", "additon"], ("--task 'additon' is not a task", "did you mean 'addition'?")),
    ([], ("records no task (no results.json naming one)", "pass --task NAME")),
    (["--task", "addition", "--loops", "0"], ("--loops: expected comma-separated loop counts >= 1 or spans A-B, "
                                              "got '0'", "e.g. 1,2,4,8 or 1-16")),
    (["--task", "addition", "--loops", "1,2.5"], ("--loops: expected comma-separated loop counts", "got '2.5'")),
    (["--task", "addition", "--loops", "4-2"], ("the span '4-2' runs backwards", "e.g. 2-4")),
    (["--task", "addition", "--loops", "1-200000"], ("over the budget of 100,000 loops",)),
    (["--task", "addition", "--n", "0"], ("--n: expected an integer >= 1, got '0'",)),
    (["--task", "addition", "--n", "2.5"], ("--n: expected an integer >= 1",)),
    (["--task", "addition", "--n", "5000000"], ("--n 5,000,000 is over the budget", "pass at most")),
    (["--task", "addition", "--levels", "9-12"], ("--levels '9-12' does not fit task 'addition' (levels 0-8)",
                                                  "harder (5-8)")),
    (["--task", "addition", "--levels", "hard"], ("--levels 'hard' does not fit", "train (0-4)")),
    (["--task", "addition", "--seed", "-1"], ("--seed: expected an integer >= 0",)),
    (["--task", "addition", "--batch-size", "0"], ("--batch-size: expected an integer >= 1",)),
])
def test_bad_arguments_are_one_line_before_the_weights_are_read(folders, options, fragments, capsys):
    user_error(["tasks", "eval", str(folders / "corrupt"), *options], capsys, *fragments)


def test_bad_models_and_outputs_are_one_line(folders, tmp_path, capsys):
    base = ["--task", "addition", "--n", "2"]
    user_error(["tasks", "eval", str(tmp_path / "absent"), *base], capsys, "no such model folder", "check the path")
    user_error(["tasks", "eval", str(folders / "llama"), *base], capsys,
               "is a 'llama' model, not a looped language model", "pass an HRM-Text, Dory or Inkling-2 loop")
    user_error(["tasks", "eval", "itrsa-sudoku", *base], capsys,  # a shipped name, resolved as sudoku eval does
               "'itrsa-sudoku' is a 'itrsa_sudoku' model, not a looped language model")
    user_error(["tasks", "eval", str(folders / "no-tokenizer"), *base], capsys, "has no tokenizer",
               "task_tokenizer().save_pretrained(folder)")
    user_error(["tasks", "eval", str(folders / "dory"), *base, "--out", str(tmp_path)], capsys, "is a folder",
               f"e.g. --out {tmp_path / 'eval.json'}")
    user_error(["tasks", "eval", str(folders / "dory"), *base, "--out", " "], capsys, "--out needs a file name",
               "e.g. --out eval.json")
    inside = folders / "dory" / "config.json"
    before = inside.read_bytes()
    user_error(["tasks", "eval", str(folders / "dory"), *base, "--out", str(inside)], capsys,
               "lies inside the model folder", "write it outside the inputs")
    assert inside.read_bytes() == before  # an input is never overwritten
    user_error(["tasks", "eval", str(folders / "corrupt"), *base], capsys, "model.safetensors")  # only now


def test_the_json_replaces_an_earlier_result_atomically(folders, tmp_path, capsys):
    out = tmp_path / "eval.json"
    out.write_text("an earlier result")
    assert main(["tasks", "eval", str(folders / "dory"), "--task", "addition", "--loops", "2", "--n", "3",
                 "--out", str(out), "--quiet"]) == 0
    record = json.loads(out.read_text())
    assert len(record["puzzles"]["addition"]) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


def test_a_shipped_checkpoint_is_scored_on_its_recorded_task_when_task_is_left_out(folders, capsys):
    """hrm-text-addition records addition5 in its results.json: leaving --task out scores that task (the same
    table as naming it); a folder that records none needs --task, said in one line."""
    argv = ["tasks", "eval", "hrm-text-addition", "--loops", "3", "--n", "16", "--quiet"]
    assert main(argv) == 0
    implicit = capsys.readouterr().out
    assert main(argv + ["--task", "addition5"]) == 0
    explicit = capsys.readouterr().out
    strip = lambda text: re.sub(r", [0-9.]+ s$", "", text.strip())   # the wall time differs
    assert strip(implicit) == strip(explicit) and "addition5 instances" in implicit
    assert "100.0%" in implicit.splitlines()[1]                     # trained at depth 3: exact there
    user_error(["tasks", "eval", str(folders / "dory"), "--n", "2"], capsys, "records no task",
               "pass --task NAME")
