"""A model whose forward draws random numbers (ViT-MAE's random masking): maps cut under the analysis' seed."""
import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import map_source
from jacobiscope.adapters._randomness import drawn_note, seeded_forward

from hf_models import tiny_inputs, tiny_model


@pytest.fixture(scope="module")
def mae():
    config = T.ViTMAEConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                            image_size=16, patch_size=4, mask_ratio=0.5)
    torch.manual_seed(0)
    return T.ViTMAEModel(config).eval()


PIXELS = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(3))
RUN = dict(loops=3, diagnostics=["spectral_norm"], layers=[0], progress=False)


def test_the_map_starts_at_the_models_own_state_drawn_under_the_seed(mae):
    """The reference: the model's own forward with torch seeded the same way — its hidden state entering block 0
    (hidden_states[0]) is the map's x0, patch for kept patch."""
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            own = mae(pixel_values=PIXELS, output_hidden_states=True).hidden_states[0]
        with map_source(mae, PIXELS, layers=[0], seed=seed) as source:
            (item,) = source
            torch.testing.assert_close(item.maps[0].x0, own, rtol=0, atol=0)
            assert drawn_note(seed) in item.notes


def test_the_same_call_gives_the_same_numbers_and_leaves_the_callers_random_state(mae):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = jacobiscope.analyze(mae, PIXELS, seed=0, **RUN)
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's stream did not move
    second = jacobiscope.analyze(mae, PIXELS, seed=0, **RUN)
    other = jacobiscope.analyze(mae, PIXELS, seed=5, **RUN)
    assert first.rows[0].state_norm == second.rows[0].state_norm
    # the same maps; products may run on another path the second time (a recorded graph): equal to float32 rounding
    # (a state drawn from other patches moves these by far more: see `other` below)
    values = [[entry["value"] for entry in report.rows[0].spectral_norm] for report in (first, second, other)]
    assert values[0] == pytest.approx(values[1], rel=1e-5)
    assert values[0] != pytest.approx(values[2], rel=1e-3)
    assert other.rows[0].state_norm != first.rows[0].state_norm  # another seed keeps other patches
    assert drawn_note(0) in first.notes and drawn_note(5) in other.notes


def test_a_forward_that_draws_nothing_says_nothing():
    model = tiny_model("gpt2")
    report = jacobiscope.analyze(model, tiny_inputs("gpt2"), **RUN)
    assert not any("draws random numbers" in note for note in report.notes)


def test_seeded_forward_seeds_forks_and_records_draws():
    torch.manual_seed(7)
    outside = torch.random.get_rng_state()
    with seeded_forward(3) as draws:
        inside = torch.rand(3)
    assert draws.any and torch.equal(torch.random.get_rng_state(), outside)
    torch.manual_seed(3)
    torch.testing.assert_close(inside, torch.rand(3), rtol=0, atol=0)
    with seeded_forward(3) as quiet:
        torch.zeros(3)
    assert not quiet.any
    torch.manual_seed(7)
    with seeded_forward(None) as unseeded:  # the global stream, used and moved on
        torch.rand(1)
    assert unseeded.any and not torch.equal(torch.random.get_rng_state(), outside)
    assert "seed torch first" in drawn_note(None)


def test_depth_dynamics_of_a_drawing_model_repeats_under_its_seed(mae):
    first = jacobiscope.depth_dynamics(mae, PIXELS, k=2, seed=0)[0]
    again = jacobiscope.depth_dynamics(mae, PIXELS, k=2, seed=0)[0]
    other = jacobiscope.depth_dynamics(mae, PIXELS, k=2, seed=4)[0]
    assert first.to_dataframe().equals(again.to_dataframe())
    assert not first.to_dataframe().equals(other.to_dataframe())
