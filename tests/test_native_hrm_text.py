"""native_loop on HRM-Text: the fast L loop, the slow H update and the full H-cycle on [z_L, z_H], each checked
iterate by iterate against the states the model's own forward computes (forward hooks), run past its configured
count, and differentiated matrix-free against the dense autograd Jacobian."""
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import autograd_jacobian, check_loop_depth_readout

H_CYCLES, L_CYCLES = 3, 4


def _hrm(cls=transformers.HrmTextModel):
    torch.manual_seed(0)
    config = transformers.HrmTextConfig(vocab_size=40, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                        num_attention_heads=2, head_dim=4, H_cycles=H_CYCLES, L_cycles=L_CYCLES,
                                        max_position_embeddings=32)
    model = cls(config).eval()
    with torch.no_grad():  # a non-zero z_L_init, so the fast state's start is not a trivial zero
        model.base_model.z_L_init.normal_()
    return model


# Padding and a bidirectional prefix: the captured mask is a real 4-D one, not sdpa's implicit causal mask.
KWARGS = {"input_ids": torch.tensor([[3, 5, 7, 9, 2]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 0]]),
          "token_type_ids": torch.tensor([[1, 1, 0, 0, 0]])}


def _own_states(model, kwargs):
    """The outputs of every L_module and H_module call during the model's own forward (forward hooks)."""
    base, calls = model.base_model, {"L": [], "H": []}
    handles = [stack.register_forward_hook(lambda _, __, out, name=name: calls[name].append(out.detach().clone()))
               for name, stack in (("L", base.L_module), ("H", base.H_module))]
    with torch.no_grad():
        model(**kwargs, use_cache=False)
    for handle in handles:
        handle.remove()
    return calls


def _expected(name, own):
    """The model's own state after t = 1 .. loops iterations of recurrence ``name``."""
    if name == "L":  # the first H-cycle's L updates
        return own["L"][:L_CYCLES]
    if name == "H":  # the first H update
        return own["H"][:1]
    return [torch.cat([own["L"][(h + 1) * L_CYCLES - 1], own["H"][h]], dim=-1) for h in range(H_CYCLES)]


@pytest.mark.parametrize("cls", [transformers.HrmTextModel, transformers.HrmTextForCausalLM])
def test_iterates_are_the_models_own_states_and_run_past_the_configured_count(cls):
    model = _hrm(cls)
    own = _own_states(model, KWARGS)
    assert len(own["L"]) == H_CYCLES * L_CYCLES and len(own["H"]) == H_CYCLES
    for name, loops in (("L", L_CYCLES), ("H", 1), ("cycle", H_CYCLES)):
        looped = jacobiscope.native_loop(model, KWARGS, recurrence=name)
        assert looped.meta["loops"] == loops and looped.meta["recurrence"] == name
        states = looped.trajectory(looped.x0, 3 * loops + 5)
        expected = _expected(name, own)
        assert len(expected) == loops
        for t, state in enumerate(expected, start=1):
            assert (states[t] - state).abs().max() <= 1e-5, (name, t)
        assert torch.isfinite(states).all() and len(states) == 3 * loops + 6, name  # and beyond the trained depth
    # x0 is the state entering the first iteration: z_L_init broadcast, and the scaled input embeddings.
    base = model.base_model
    z_high = base.embed_tokens(KWARGS["input_ids"]) * base.config.embedding_scale
    cycle = jacobiscope.native_loop(model, KWARGS, recurrence="cycle")
    assert torch.equal(cycle.x0, torch.cat([base.z_L_init.expand_as(z_high), z_high], -1).detach())


@pytest.mark.parametrize("name", ["L", "H", "cycle"])
def test_the_jacobian_through_one_step_is_the_dense_one(name):
    model = _hrm()
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7, 9]])}, recurrence=name)
    # The model runs its early L-cycles under no_grad; the step calls the stacks directly, so jvp/vjp see them all.
    for looped, tol in ((looped, None), (looped.to(torch.float64), 1e-8)):
        x = looped.x0
        dense = autograd_jacobian(looped.step, x)
        sigma = float(jacobiscope.spectral_norm(looped, x, tol=tol).value)
        assert torch.isfinite(torch.tensor(sigma))
        assert sigma == pytest.approx(float(torch.linalg.matrix_norm(dense, ord=2)), rel=1e-5), x.dtype


def test_recurrences_are_listed_and_a_wrong_name_names_the_offered_ones():
    model = _hrm()
    assert jacobiscope.list_recurrences(model) == ["L", "H", "cycle"]
    assert jacobiscope.list_recurrences("hrm_text") == ["L", "H", "cycle"]
    assert jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]])).meta["recurrence"] == "L"  # the default
    with pytest.raises(AdapterError, match="no recurrence 'z_H' — it offers L, H, cycle"):
        jacobiscope.native_loop(model, torch.tensor([[1, 2, 3]]), recurrence="z_H")


@pytest.mark.parametrize("name", ["L", "H", "cycle"])
def test_the_readout_is_the_rest_of_the_forward_and_feeds_the_loop_depth_sweep(name):
    """Each recurrence reads out through what the model still does after it (the remaining H-cycles, lm_head(z_H)):
    at the configured count that is the model's own logits."""
    check_loop_depth_readout(_hrm(transformers.HrmTextForCausalLM), KWARGS, name)
    # A bare HrmTextModel has no head, so no readout (its final state is not logits).
    assert "readout" not in jacobiscope.native_loop(_hrm(), KWARGS, recurrence=name).meta
