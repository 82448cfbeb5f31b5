"""`compile_loop` on the reference solvers: a training forward through `torch.compile` computes what the eager
forward computes (loss and gradients), a copy of a model runs with its own weights, and evaluation stays eager.
Slow: each compile takes tens of seconds on a CPU (pytest -m slow; CI runs it)."""
import copy

import pytest
import torch

from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

pytestmark = pytest.mark.slow

MODELS = {
    "itrsa": lambda: ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3)),
    "akorn": lambda: AKOrNForSudoku(AKOrNConfig(hidden_size=16, num_heads=2, oscillator_dim=4, loops=3,
                                                oscillator_norm=True)),
}


def _batch(seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 10, (4, 81), generator=generator)
    labels = torch.randint(1, 10, (4, 81), generator=generator)
    return ids, torch.where(ids > 0, ids, labels)


def _loss_and_grads(model, ids, labels, **kwargs):
    model.zero_grad()
    kwargs = {"generator": torch.Generator().manual_seed(0), **kwargs} if isinstance(model, AKOrNForSudoku) else kwargs
    out = model(ids, labels=labels, return_energies=True, **kwargs)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_training_forward_matches_eager(name):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    ids, labels = _batch(1)
    eager, eager_grads = _loss_and_grads(model, ids, labels)
    model.compile_loop = True
    compiled, compiled_grads = _loss_and_grads(model, ids, labels)
    assert torch.allclose(compiled.loss, eager.loss, rtol=1e-5, atol=1e-6)
    assert torch.allclose(compiled.energies, eager.energies, rtol=1e-4, atol=1e-5)
    assert compiled_grads.keys() == eager_grads.keys() and len(eager_grads) > 5
    for key, grad in eager_grads.items():
        assert torch.allclose(compiled_grads[key], grad, rtol=1e-4, atol=1e-6), key
    # another loop count (test-time scaling, the recipe's random loop counts): still the eager numbers
    again, _ = _loss_and_grads(model, ids, labels, loops=5)
    model.compile_loop = False
    reference, _ = _loss_and_grads(model, ids, labels, loops=5)
    assert torch.allclose(again.loss, reference.loss, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_copy_runs_with_its_own_weights_and_evaluation_stays_eager(name):
    torch.manual_seed(0)
    model = MODELS[name]().train()
    model.compile_loop = True
    ids, labels = _batch(2)
    original, _ = _loss_and_grads(model, ids, labels)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in twin.parameters():
            parameter.mul_(1.5)
    assert twin.compile_loop
    twins, _ = _loss_and_grads(twin, ids, labels)
    twin.compile_loop = False
    twins_eager, _ = _loss_and_grads(twin, ids, labels)
    assert torch.allclose(twins.loss, twins_eager.loss, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(twins.loss, original.loss, rtol=1e-3)
    # evaluation (eval mode, no gradients) never compiles: the counters of dynamo do not move
    from torch._dynamo.utils import counters

    before = dict(counters["stats"])
    with torch.no_grad():
        model.eval()(ids)
    assert dict(counters["stats"]) == before


def test_a_recipe_trains_through_the_compiled_loop_as_it_trains_eagerly(tmp_path):
    import json

    from jacobiscope.recipes.sudoku import SudokuRecipe, train_sudoku

    def run(folder, compile_loop):
        recipe = SudokuRecipe(arch="akorn", hidden_size=16, num_heads=2, oscillator_dim=4, loops=2, loops_min=1,
                              loops_max=3, batch_size=8, learning_rate=3e-3, max_steps=8, warmup_steps=0,
                              train_limit=32, eval_limit=4, validation_loops=[2], save_steps=4, logging_steps=2,
                              ema_beta=0.0, augment=False, compile_loop=compile_loop)
        train_sudoku(recipe, tmp_path / folder, progress=False)
        state = json.loads(next((tmp_path / folder).glob("checkpoint-8/trainer_state.json")).read_text())
        return [entry["loss"] for entry in state["log_history"] if "loss" in entry]

    eager, compiled = run("eager", False), run("compiled", True)
    assert len(eager) == len(compiled) == 4
    # the same batches, loop counts and math: the logged losses agree to float32 rounding carried over 8 steps
    assert compiled == pytest.approx(eager, rel=1e-4)
    assert json.loads((tmp_path / "compiled" / "recipe.json").read_text())["compile_loop"] is True
