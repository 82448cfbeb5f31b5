"""Models run with accelerate's big-model inference (device_map with disk offload): `analyze` (block maps and a
model's own loop) and `loop_lens` give the numbers of the same model in memory, the model stays offloaded
afterwards, and weights no hook can load are still refused with the fix."""
import gc

import pandas
import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters._offload import hold_loaded, is_offloaded, materialized_copy
from jacobiscope.errors import AdapterError

pytest.importorskip("accelerate")


def offloaded_copy(model, folder, on_disk):
    """``model`` saved and loaded again with the top-level modules in ``on_disk`` offloaded to disk."""
    model.save_pretrained(folder)
    where = {name: "cpu" for name in _leaves(model)}
    where.update({name: "disk" for name in on_disk})
    return type(model).from_pretrained(folder, device_map=where, offload_folder=str(folder / "offload")).eval()


def _leaves(model):
    """Module paths two levels down plus the direct parameters, enough for a device_map to cover every weight."""
    names = []
    for name, child in model.named_children():
        inner = [f"{name}.{n}" for n, _ in child.named_children()]
        names += inner + [f"{name}.{n}" for n, _ in child.named_parameters(recurse=False)] if inner else [name]
    return names


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def hrm_text():
    from jacobiscope.recipes.looped_lm import LoopedLMRecipe, build_model

    torch.manual_seed(0)
    recipe = LoopedLMRecipe(family="hrm_text", task="addition5", hidden_size=32, intermediate_size=64, num_heads=2,
                            loops=3)
    return build_model(recipe).eval()


def numbers(report):
    return [(row.results["lyapunov"].exponents, row.results["spectral_norm"].values) for row in report.rows]


def assert_same_numbers(got, expected):
    """The same weights and arithmetic; only the product path may differ at rounding (eager jvps, or a graph of the
    same structure recorded by an earlier call in this process: `jacobiscope.linalg._linearized`)."""
    flat_got = [v for row in got for part in row for v in part]
    flat_expected = [v for row in expected for part in row for v in part]
    assert len(flat_got) == len(flat_expected)
    assert flat_got == pytest.approx(flat_expected, rel=1e-6, abs=1e-7)


MEASURED = ["lyapunov", "spectral_norm"]   # a jvp path and a vjp path; the other diagnostics ride on the same maps


def test_block_maps_of_an_offloaded_model_measure_what_the_model_in_memory_measures(tmp_path):
    model = gpt2()
    ids = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(1))
    in_memory = jacobiscope.analyze(model, {"input_ids": ids}, loops=6, diagnostics=MEASURED, progress=False)
    offloaded = offloaded_copy(model, tmp_path, ["transformer.h"])
    assert is_offloaded(offloaded) and next(offloaded.transformer.h[0].parameters()).is_meta
    report = jacobiscope.analyze(offloaded, {"input_ids": ids}, loops=6, diagnostics=MEASURED, progress=False)
    assert_same_numbers(numbers(report), numbers(in_memory))
    assert any("offloaded by accelerate" in note for note in report.notes)
    assert all(p.is_meta for p in offloaded.transformer.h.parameters())   # still offloaded


@pytest.mark.slow   # suite time (~10 s); CI runs it with the other slow adapter checks
def test_a_models_own_loop_and_the_loop_lens_through_offloaded_weights(tmp_path):
    model = hrm_text()
    ids = torch.randint(3, 14, (1, 10), generator=torch.Generator().manual_seed(2))
    options = {"recurrence": "cycle", "loops": 6, "diagnostics": MEASURED, "progress": False}
    in_memory = jacobiscope.analyze(model, {"input_ids": ids}, **options)
    lens_in_memory = jacobiscope.loop_lens(model, {"input_ids": ids}, recurrence="cycle", loops=4, jacobian_every=2,
                                           spectral_radius=False)
    offloaded = offloaded_copy(model, tmp_path, ["model.L_module", "model.H_module"])
    report = jacobiscope.analyze(offloaded, {"input_ids": ids}, **options)
    assert_same_numbers(numbers(report), numbers(in_memory))
    lens = jacobiscope.loop_lens(offloaded, {"input_ids": ids}, recurrence="cycle", loops=4, jacobian_every=2,
                                 spectral_radius=False)
    # Equal up to the spectral norm's Lanczos tolerance: its products may run eagerly or from a recording
    # (`_linearized`) depending on what ran before in this process.
    pandas.testing.assert_frame_equal(lens.to_dataframe(), lens_in_memory.to_dataframe(), check_exact=False,
                                      rtol=1e-4)
    del lens
    gc.collect()
    assert all(p.is_meta for p in offloaded.model.H_module.parameters())   # offloaded again once the maps are gone


def test_holders_keep_the_weights_loaded_until_the_last_release(tmp_path):
    offloaded = offloaded_copy(gpt2(), tmp_path, ["transformer.h"])
    first, second = hold_loaded(offloaded), hold_loaded(offloaded)
    assert not any(p.is_meta for p in offloaded.parameters())
    first()
    first()   # a release counts once
    assert not any(p.is_meta for p in offloaded.parameters())
    second()
    assert all(p.is_meta for p in offloaded.transformer.h.parameters())


def test_a_materialized_block_is_a_plain_module_with_the_offloaded_weights(tmp_path):
    model = gpt2()
    offloaded = offloaded_copy(model, tmp_path, ["transformer.h"])
    block = materialized_copy(offloaded.transformer.h[1], torch.device("cpu"))
    assert not hasattr(block, "_hf_hook")
    for (name, mine), (_, theirs) in zip(block.named_parameters(), model.transformer.h[1].named_parameters()):
        assert torch.equal(mine, theirs), name


def test_weights_on_meta_that_no_hook_loads_are_refused_with_the_fix():
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(AdapterError, match="meta device.*without device_map='meta'"):
        jacobiscope.analyze(model, {"input_ids": torch.zeros(1, 4, dtype=torch.long)}, loops=4, progress=False)


def test_the_regularizers_read_offloaded_weights_and_give_the_in_memory_values(tmp_path):
    """Before: spectral_penalty of an offloaded model was a meta tensor (no value, no error)."""
    from jacobiscope.training.regularizers import energy_penalty, jacobian_spectral_penalty, spectral_penalty

    model = gpt2()
    offloaded = offloaded_copy(model, tmp_path, ["transformer.h"])
    # float32 rounding apart (the store's contiguous copies are reduced in another order)
    assert float(spectral_penalty(offloaded)) == pytest.approx(float(spectral_penalty(model).detach()), rel=1e-6)
    assert float(energy_penalty(offloaded)) == pytest.approx(float(energy_penalty(model).detach()), rel=1e-6)
    ids = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(3))
    maps = [jacobiscope.looped_block(m, {"input_ids": ids}, layer=1) for m in (model, offloaded)]
    penalties = [float(jacobian_spectral_penalty(looped, looped.x0).penalty.detach()) for looped in maps]
    assert penalties[0] == penalties[1] and penalties[0] > 0
