"""The text tasks of looped language models: answers against the independent solver, seeded determinism, harder
levels measured harder on the instance, the encoding, and hostile arguments."""
import random

import pytest
import torch

from jacobiscope.data import tasks
from jacobiscope.data.tasks import (
    AdditionTask, ChainTask, DigitSumTask, JumpTask, ReachabilityTask, TaskExample, encode, exact_match, get_task, list_tasks,
    task_tokenizer,
)
from jacobiscope.errors import ArgumentError

TASKS = list_tasks()


def _sum_reference(prompt):
    # Schoolbook addition digit by digit, least significant first: a third way to the answer (solve uses int()).
    a, b = prompt[:-1].split("+")
    digits, carry = [], 0
    for da, db in zip(reversed(a), reversed(b)):
        total = int(da) + int(db) + carry
        digits.append(str(total % 10))
        carry = total // 10
    return str(carry) + "".join(reversed(digits))


def _hops_reference(prompt):
    # Breadth-first search over the edge list: a different algorithm from the task's walk.
    graph, query = prompt[:-1].split("|")
    edges = {}
    for pair in graph.split(","):
        edges.setdefault(pair[0], []).append(pair[1])
    frontier, seen, hops = {query[0]}, {query[0]}, 0
    while frontier:
        if query[2] in frontier:
            return hops
        frontier = {y for x in frontier for y in edges.get(x, [])} - seen
        seen |= frontier
        hops += 1
    return None


def _chain_reference(prompt):
    # Bottom-up from the chain ends (the variables defined by a digit, one look-up), a round at a time: every
    # variable is resolved in the round of its look-up count; a different algorithm from the task's walk down from
    # the query.
    body, query = prompt[:-1].split("|")
    definitions = {pair[0]: pair[1] for pair in body.split(",")}
    resolved = {name: (value, 1) for name, value in definitions.items() if value.isdigit()}
    while query not in resolved:
        resolved.update({name: (resolved[value][0], resolved[value][1] + 1)
                         for name, value in definitions.items() if name not in resolved and value in resolved})
    return resolved[query]


def _walk_reference(prompt):
    # Every cell's landing letter and jump count, left to right (a cell's jump lands on a cell already resolved):
    # dynamic programming over all cells, not the task's walk from the end.
    cells = prompt[:-1]
    letter, jumps = [None] * len(cells), [None] * len(cells)
    for i, cell in enumerate(cells):
        if cell.isalpha():
            letter[i], jumps[i] = cell, 0
        elif i - int(cell) >= 0:
            letter[i], jumps[i] = letter[i - int(cell)], jumps[i - int(cell)] + 1 if jumps[i - int(cell)] is not None \
                else None
    return letter[-1], jumps[-1]


def test_list_and_get():
    assert TASKS == ["addition", "addition5", "chains", "chains10", "chains4q", "digitsum", "jumps", "parity",
                     "reachability"]
    for name in TASKS:
        task = get_task(name)
        assert task.name == name
        assert task.train_levels[1] < task.harder_levels[0]


@pytest.mark.parametrize("name", TASKS)
def test_answers_match_the_solver_and_the_levels_the_generator(name):
    task = get_task(name)
    examples = task.generate(400, levels=task.supported_levels, seed=7)
    assert all(isinstance(ex, TaskExample) for ex in examples)
    assert all(task.solve(ex.prompt) == ex.answer for ex in examples)
    assert all(task.level_of(ex.prompt) == ex.level for ex in examples)
    # Every level of the range shows up (drawn uniformly: 400 draws over <= 9 levels).
    assert {ex.level for ex in examples} == set(range(task.supported_levels[0], task.supported_levels[1] + 1))
    # The input length does not grow with the knob: harder is deeper, not longer.
    assert len({len(ex.prompt) for ex in examples}) == 1
    assert len({len(ex.answer) for ex in examples}) == 1


def test_addition_against_schoolbook_addition():
    task = get_task("addition")
    for ex in task.generate(300, levels=task.supported_levels, seed=1) + get_task("addition5").generate(100, seed=1):
        assert ex.answer == _sum_reference(ex.prompt)
    # Hand-made carry chains: 3 ones below a 9-run, and a chain of the full width.
    assert task.level_of("00000999+00000001=") == 3
    assert task.level_of("99999999+00000001=") == 8
    assert task.solve("99999999+00000001=") == "100000000"
    assert task.level_of("12345678+11111111=") == 0


def test_reachability_against_breadth_first_search():
    task = get_task("reachability")
    for ex in task.generate(300, levels=task.supported_levels, seed=2):
        assert int(ex.answer) == _hops_reference(ex.prompt)
    assert task.solve("ab,ba,cc,dd,ee,ff,gg,hh|a>c:") == "-"


def test_chains_against_substitution():
    task = get_task("chains")
    assert (task.train_levels, task.harder_levels) == ((1, 4), (5, 12))
    for ex in task.generate(300, levels=task.supported_levels, seed=5):
        assert (ex.answer, ex.level) == _chain_reference(ex.prompt)
        body = ex.prompt.split("|")[0].split(",")
        assert sorted(pair[0] for pair in body) == list("abcdefghijklmnop")   # each variable defined once
    # The digits present do not give the answer away, at any level: always 4 chains, 4 different digits.
    for ex in task.generate(200, levels=task.supported_levels, seed=6):
        ends = [c for c in ex.prompt if c.isdigit()]
        assert len(ends) == len(set(ends)) == 4 and ex.answer in ends
    assert task.solve("ab,b7,c3,dc,e1,fe,g0,hg,i2,j5,kj,l9,m4,n8,o6,pn|a:") == "7"
    assert task.level_of("ab,bc,cd,de,ef,fg,gh,hi,ij,jk,kl,lm,mn,no,op,p1|a:") == 16
    small = ChainTask(variables=3, train_max=1, chains=2)
    assert (small.train_levels, small.harder_levels) == ((1, 1), (2, 2))
    assert all(small.level_of(ex.prompt) == 2 for ex in small.generate(10, levels=2))


def test_chains_with_a_query_per_chain_against_substitution():
    task = get_task("chains4q")
    for ex in task.generate(200, levels=task.supported_levels, seed=8):
        body, queries = ex.prompt[:-1].split("|")
        answers = [_chain_reference(f"{body}|{query}:") for query in queries]
        assert ex.answer == "".join(digit for digit, _ in answers)
        assert ex.level == max(hops for _, hops in answers)
        assert len(set(ex.answer)) == 4   # one query per chain: four different digits, none copied from another
    with pytest.raises(ArgumentError, match="queries must be an int in \\[1, 3\\]"):
        ChainTask(variables=10, chains=3, train_max=3, queries=4)


def test_jumps_against_dynamic_programming():
    task = get_task("jumps")
    assert (task.train_levels, task.harder_levels) == ((1, 4), (5, 12))
    for ex in task.generate(300, levels=task.supported_levels, seed=5):
        assert (ex.answer, ex.level) == _walk_reference(ex.prompt)
        letters = [c for c in ex.prompt[:-1] if c.isalpha()]
        assert len(letters) == len(set(letters)) == 10 and len(ex.prompt) == 33
    assert task.solve("1" * 31 + "a:") == "a" and task.level_of("a" + "1" * 31 + ":") == 31
    small = JumpTask(cells=6, train_max=1, harder_max=3, letters=2)
    assert all(small.level_of(ex.prompt) == 3 for ex in small.generate(10, levels=3))


def _running_sum_reference(prompt, modulus):
    # A left-to-right automaton over the cells (blank: no change), as a one-cell-per-pass loop would run it: a
    # different route from the task's sum of the digits.
    state, seen = 0, 0
    for cell in prompt[:-1]:
        if cell != "-":
            state, seen = (state + int(cell)) % modulus, seen + 1
    return str(state), seen


def test_digit_sums_against_a_running_automaton():
    parity, digitsum = get_task("parity"), get_task("digitsum")
    assert (parity.train_levels, parity.harder_levels) == ((1, 8), (9, 24))
    assert (digitsum.train_levels, digitsum.harder_levels) == ((1, 6), (7, 16))
    for task, modulus in ((parity, 2), (digitsum, 10)):
        examples = task.generate(300, levels=task.supported_levels, seed=11)
        for ex in examples:
            assert (ex.answer, ex.level) == _running_sum_reference(ex.prompt, modulus)
        # Digits of the row are uniform: every answer digit appears, at about its share.
        counts = [sum(ex.answer == str(d) for ex in examples) for d in range(modulus)]
        assert min(counts) > 300 / modulus / 2, counts
    assert parity.solve("-" * 21 + "111:") == "1" and parity.solve("1" * 24 + ":") == "0"
    assert digitsum.solve("-" * 12 + "9999:") == "6" and digitsum.level_of("0" * 16 + ":") == 16
    small = DigitSumTask(cells=3, modulus=3, train_max=1)
    assert (small.train_levels, small.harder_levels) == ((1, 1), (2, 2))
    assert {ex.prompt[-2] in "012" for ex in small.generate(20, levels=2)} == {True}


@pytest.mark.parametrize("name", TASKS)
def test_seeded_and_prefix_stable(name):
    task = get_task(name)
    assert task.generate(50, seed=3) == task.generate(50, seed=3)
    assert task.generate(50, seed=3) != task.generate(50, seed=4)
    assert task.generate(50, seed=3)[:20] == task.generate(20, seed=3)


@pytest.mark.parametrize("name", TASKS)
def test_harder_levels_are_harder_on_the_instance(name):
    task = get_task(name)
    train = task.generate(200, seed=0)
    harder = task.generate(200, levels=task.harder_levels, seed=0)
    assert max(task.level_of(ex.prompt) for ex in train) <= task.train_levels[1]
    assert min(task.level_of(ex.prompt) for ex in harder) >= task.harder_levels[0] > task.train_levels[1]


def test_single_level_and_small_sizes():
    task = AdditionTask(digits=4)
    assert {ex.level for ex in task.generate(30, levels=3, seed=0)} == {3}
    small = ReachabilityTask(nodes=5, train_max=2)
    assert (small.train_levels, small.harder_levels) == ((1, 2), (3, 4))
    assert all(small.level_of(ex.prompt) == 4 for ex in small.generate(20, levels=4))


def test_encode_supervises_answer_and_eos_only():
    tok = task_tokenizer()
    examples = get_task("addition").generate(3, seed=0) + get_task("reachability").generate(2, seed=0)
    batch = encode(examples, tok)
    assert batch["input_ids"].shape == (5, 1 + 28 + 1 + 1)
    for i, ex in enumerate(examples):
        n = 1 + len(ex.prompt) + len(ex.answer) + 1
        ids = batch["input_ids"][i]
        assert ids[0] == tok.bos_token_id and ids[n - 1] == tok.eos_token_id
        assert (ids[n:] == tok.pad_token_id).all() and batch["attention_mask"][i].sum() == n
        assert tok.decode(ids[1:n - 1]) == ex.prompt + ex.answer
        supervised = batch["labels"][i][batch["answer_mask"][i]]
        assert tok.decode(supervised[:-1]) == ex.answer and supervised[-1] == tok.eos_token_id
    assert encode(examples, tok, max_length=40)["input_ids"].shape == (5, 40)


def test_exact_match_under_teacher_forcing():
    tok = task_tokenizer()
    batch = encode(get_task("addition").generate(4, seed=0), tok)
    # Perfect logits: the next token's one-hot at every position.
    nxt = torch.cat([batch["input_ids"][:, 1:], batch["input_ids"][:, :1]], dim=1)
    logits = torch.nn.functional.one_hot(nxt, len(tok)).float()
    assert exact_match(logits, batch["labels"]).tolist() == [True] * 4
    last_answer = batch["answer_mask"][2].nonzero()[-1].item()   # the <eos> of row 2, predicted at last_answer - 1
    logits[2, last_answer - 1] = torch.roll(logits[2, last_answer - 1], 1)
    assert exact_match(logits, batch["labels"]).tolist() == [True, True, False, True]
    # A wrong token in the prompt does not count: only supervised tokens do.
    logits[0, 3] = torch.roll(logits[0, 3], 1)
    assert exact_match(logits, batch["labels"]).tolist() == [True, True, False, True]


def test_tokenizer_round_trip_offline(tmp_path):
    from transformers import AutoTokenizer
    tok = task_tokenizer()
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "".join(random.Random(0).choice(tasks.CHARACTERS) for _ in range(50))
    assert loaded(text)["input_ids"] == tok(text)["input_ids"] == [tasks.VOCAB[c] for c in text]
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)


@pytest.mark.parametrize("call, words", [
    (lambda: get_task("additon"), ["unknown task 'additon'", "did you mean 'addition'"]),
    (lambda: get_task(3), ["unknown task 3", "pass one of"]),
    (lambda: get_task("addition").generate(-1), ["n must be in [0,", "pass a count"]),
    (lambda: get_task("addition").generate(2.5), ["n must be an int", "n=100"]),
    (lambda: get_task("addition").generate(2, levels=9), ["levels 0..8", "levels=9", "harder_levels=(5, 8)"]),
    (lambda: get_task("reachability").generate(2, levels=(0, 3)), ["levels 1..7", "pass levels inside (1, 7)"]),
    (lambda: get_task("addition").generate(2, levels=(4, 2)), ["low > high", "levels=(2, 4)"]),
    (lambda: get_task("addition").generate(2, levels="hard"), ["levels must be \"train\", \"harder\", an int or",
                                                               "levels=(0, 4)"]),
    (lambda: get_task("addition").generate(2, seed="x"), ["seed must be an int"]),
    (lambda: get_task("addition").solve("12+34="), ["not a addition prompt", "8-digit"]),
    (lambda: get_task("reachability").level_of("ab|a>b:"), ["not a reachability prompt", "one outgoing edge"]),
    (lambda: AdditionTask(digits=1), ["digits must be an int in [2, 30]"]),
    (lambda: ChainTask(variables=27), ["variables must be an int in [2, 26]"]),
    (lambda: JumpTask(cells=3), ["cells must be an int in [4, 200]"]),
    (lambda: JumpTask(cells=10, letters=6), ["letters must be an int in [2, 5]"]),
    (lambda: JumpTask(cells=10, letters=5, train_max=5), ["train_max must be an int in [1, 4]"]),
    (lambda: get_task("jumps").solve("12a:"), ["not a jumps prompt", "32 cells"]),
    (lambda: get_task("jumps").solve("3" * 32 + ":"), ["not a jumps prompt", "left the cells"]),
    (lambda: ChainTask(variables=8, train_max=5), ["train_max must be an int in [1, 4]"]),
    (lambda: ChainTask(variables=8, train_max=4, harder_max=4), ["harder_max must be an int in [5, 5]"]),
    (lambda: ChainTask(variables=8, chains=1), ["chains must be an int in [2, 7]"]),
    (lambda: get_task("chains").solve("ab,ba,c1|a:"), ["not a chains prompt", "defined once"]),
    (lambda: get_task("chains").solve("ab,ba,c1,d1,e1,f1,g1,h1,i1,j1,k1,l1,m1,n1,o1,p1|a:"),
     ["not a chains prompt", "no cycle"]),
    (lambda: ReachabilityTask(nodes=11), ["nodes must be an int in [3, 10]"]),
    (lambda: DigitSumTask(modulus=11), ["modulus must be an int in [2, 10]", "modulus=2 for parity"]),
    (lambda: DigitSumTask(cells=1), ["cells must be an int in [2, 200]"]),
    (lambda: DigitSumTask(cells=8, train_max=8), ["train_max must be an int in [1, 7]"]),
    (lambda: get_task("parity").solve("-" * 24 + ":"), ["not a parity prompt", "at least one digit"]),
    (lambda: get_task("parity").solve("-" * 22 + "12:"), ["not a parity prompt", "digit in 0-1"]),
    (lambda: get_task("parity").solve("-" * 20 + "1-01:"), ["not a parity prompt", "blanks '-' then"]),
    (lambda: get_task("digitsum").solve("123:"), ["not a digitsum prompt", "16 cells"]),
    (lambda: encode([], task_tokenizer()), ["at least one example"]),
    (lambda: encode([TaskExample("1+2=", "3", 0)], task_tokenizer(), max_length=3), ["max_length=3", ">= 7"]),
    (lambda: encode([TaskExample("1 + 2=", "3", 0)], task_tokenizer()), ["outside the task vocabulary", "[' ']"]),
    (lambda: encode(["1+2=3"], task_tokenizer()), ["examples[0] is str", "Task.generate"]),
])
def test_hostile_arguments_name_problem_and_fix(call, words):
    with pytest.raises(ArgumentError) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, message
    assert " — " in message


def test_levels_by_name_are_the_tasks_train_and_harder_ranges():
    task = get_task("addition5")
    assert task.generate(20, levels="harder", seed=3) == task.generate(20, levels=task.harder_levels, seed=3)
    assert task.generate(5, levels="train", seed=3) == task.generate(5, seed=3)
    assert all(task.harder_levels[0] <= task.level_of(ex.prompt) <= task.harder_levels[1]
               for ex in task.generate(20, levels="harder", seed=3))
