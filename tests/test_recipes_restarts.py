"""Restart-and-select: restart 0 is the plain solve (ItrSA and AKOrN), each selection picks the restart its rule
names (recomputed here from the model's own forward on the same starts), and bad arguments are refused."""
import pytest
import torch

from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku
from jacobiscope.recipes import restart_select

PUZZLES = ["530070000600195000098000060800060003400803001700020006060000280000419005000080079",
           "000000907000420180000705026100904000050000040000507009920108000034059000507000000"]


def itrsa():
    torch.manual_seed(0)
    model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=4)).eval()
    with torch.no_grad():   # learned norm gains, as a trained model has (at 1 a second normalization is a no-op)
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    assert any("norm" in name for name, _ in model.named_parameters())
    return model


def test_restart_zero_is_the_plain_solve_and_one_restart_changes_nothing():
    model = itrsa()
    plain = model.solve(PUZZLES, loops=6)   # 5 loops, and the one that reads the residual
    picks = restart_select(model, PUZZLES, loops=5, restarts=4, noise=0.3, seed=1)
    assert torch.equal(picks["first"], plain) and torch.equal(picks["all"][:, 0], plain)
    single = restart_select(model, PUZZLES, loops=5, restarts=1, noise=0.3)
    assert all(torch.equal(single[name], plain) for name in ("first", "residual", "energy", "basin"))


def test_the_selections_pick_the_restarts_their_rules_name():
    """The residual and energy of each start recomputed from the model's step on the same noised starts."""
    model = itrsa()
    restarts, loops, noise = 5, 3, 0.8
    picks = restart_select(model, PUZZLES, loops=loops, restarts=restarts, noise=noise, seed=3)
    ids = torch.tensor([[int(c) for c in p] for p in PUZZLES]).repeat_interleave(restarts, 0)
    generator = torch.Generator().manual_seed(3)
    injection = model.injection(ids)
    x = model.initial_state(injection)
    kicks = torch.randn(x.shape, generator=generator)
    kicked = model.norm(x + noise * x.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt() * kicks)
    x = torch.where((torch.arange(len(ids)) % restarts == 0).view(-1, 1, 1), x, kicked)   # restart 0: its own start
    with torch.no_grad():
        for _ in range(loops):
            x = model.step(x, injection)
        residual = ((model.step(x, injection) - x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)).reshape(2, -1)
        energy = (-(x * model.drive(x, injection)).sum(dim=(-1, -2))).reshape(2, -1)
        digits = model.readout(model.head_norm(model.step(x, injection))).argmax(-1) + 1
    expected_grids = torch.where(ids > 0, ids, digits).reshape(2, restarts, 81)
    grids = picks["all"]
    assert torch.equal(grids, expected_grids)
    # the grids of a tiny random model hardly depend on the start; the residuals and energies do
    torch.testing.assert_close(picks["residuals"], residual, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(picks["energies"], energy, rtol=1e-5, atol=1e-5)
    for i in range(2):
        assert torch.equal(picks["residual"][i], grids[i, int(residual[i].argmin())])
        assert torch.equal(picks["energy"][i], grids[i, int(energy[i].argmin())])
        counts = [sum(torch.equal(grids[i, j], grids[i, k]) for k in range(restarts)) for j in range(restarts)]
        assert sum(torch.equal(picks["basin"][i], grids[i, j]) for j in range(restarts)) == max(counts)
        assert all((picks[name][i][ids[i * restarts] > 0] == ids[i * restarts][ids[i * restarts] > 0]).all()
                   for name in ("residual", "energy", "basin"))   # givens kept


def test_akorn_restarts_are_its_own_noise_draws():
    """The starts are AKOrN's own initial states drawn from the seeded generator; the residual pick recomputed."""
    torch.manual_seed(0)
    model = AKOrNForSudoku(AKOrNConfig(hidden_size=16, oscillator_dim=4, loops=3, num_heads=2)).eval()
    picks = restart_select(model, PUZZLES, loops=3, restarts=3, seed=5)
    ids = torch.tensor([[int(c) for c in p] for p in PUZZLES]).repeat_interleave(3, 0)
    with torch.no_grad():
        injection = model.injection(ids)
        x = model.initial_state(ids, injection, generator=torch.Generator().manual_seed(5))
        assert not torch.allclose(x[0], x[1])   # different draws for the restarts of one puzzle
        for _ in range(3):
            x = model.step(x, injection)
        residual = ((model.step(x, injection) - x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)).reshape(2, 3)
    for i in range(2):
        assert torch.equal(picks["residual"][i], picks["all"][i, int(residual[i].argmin())])
    again = restart_select(model, PUZZLES, loops=3, restarts=3, seed=5)
    assert all(torch.equal(picks[k], again[k]) for k in picks)


@pytest.mark.parametrize("kwargs, words", [(dict(loops=0), "loops an int >= 1"), (dict(restarts=True),
                                           "restarts an int >= 1"), (dict(noise=-1.0), "noise a finite number"),
                                           (dict(noise=float("nan")), "noise a finite number")])
def test_bad_arguments_are_refused_with_the_fix(kwargs, words):
    arguments = dict(loops=2, restarts=2) | kwargs
    with pytest.raises(ArgumentError, match=words):
        restart_select(itrsa(), PUZZLES, **arguments)
