"""`map_source`, the one map source: the blocks are looked up once per analyze, the maps equal what the lower-level
calls (`looped_block` / `build_maps`, `native_loop`, a reference solver's own recurrence) give, the model is restored
however the block ends, and the choices are checked before any input is prepared."""
import sys

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.adapters import AdapterError
from jacobiscope.adapters import map_source, plan_maps
from jacobiscope.adapters.inputs import prepare_inputs
from jacobiscope.adapters.looped import build_maps, prepare_model
from jacobiscope.errors import ArgumentError
from hf_models import tiny_inputs, tiny_model

LOOPS = 6


def _trajectory(looped, steps=LOOPS):
    return looped.trajectory(looped.x0, steps)


@pytest.fixture()
def find_blocks_calls(monkeypatch):
    """How often the real `find_blocks` runs: every module holding it gets a counting wrapper around it (a spy,
    the real function still answers)."""
    from jacobiscope.adapters import spec

    real, calls = spec.find_blocks, []

    def counting(model):
        calls.append(type(model).__name__)
        return real(model)

    for name, module in list(sys.modules.items()):
        if name.startswith("jacobiscope") and getattr(module, "find_blocks", None) is real:
            monkeypatch.setattr(module, "find_blocks", counting)
    return calls


@pytest.mark.parametrize("mode", ["block", "attention"])
def test_analyze_looks_up_the_blocks_once(find_blocks_calls, mode):
    model = tiny_model("gpt2")
    report = jacobiscope.analyze(model, tiny_inputs("gpt2", batch=2), mode=mode, loops=2, k=1, eigen_k=1,
                                 diagnostics=["lyapunov"], progress=False)
    assert len(report.rows) == 6  # 2 inputs x 3 blocks, from one lookup
    assert find_blocks_calls == ["GPT2Model"]
    jacobiscope.describe(model, tiny_inputs("gpt2"), mode=mode, loops=2, k=1, diagnostics=["lyapunov"])
    assert find_blocks_calls == ["GPT2Model"] * 2


def test_a_model_with_its_own_loop_never_looks_for_blocks(find_blocks_calls):
    jacobiscope.analyze(_albert(), torch.tensor([[3, 5, 7, 9]]), loops=2, k=1, diagnostics=["lyapunov"],
                        progress=False)
    assert find_blocks_calls == []


def test_block_maps_equal_the_old_per_example_path():
    model, ids = tiny_model("gpt2"), tiny_inputs("gpt2", batch=2, length=5)
    with map_source(model, ids, layers=[0, -1]) as source:
        items = list(source)
    assert [item.label for item in items] == ["input[0]", "input[1]"]
    assert [[m.info.layer for m in item.maps] for item in items] == [[0, 2], [0, 2]]
    assert items[0].provenance.adapter == "gpt2" and items[0].provenance.blocks == 3
    # The old analyze path: prepare the model, one example per input, build_maps looking the blocks up itself.
    prepared = prepare_model(model)
    try:
        for item, example in zip(items, prepare_inputs(model, ids).examples()):
            old = build_maps(prepared, example, [0, -1], "block", None, None)
            for new_map, old_map in zip(item.maps, old):
                assert torch.equal(_trajectory(new_map), _trajectory(old_map))
                assert new_map.info.present() == {**old_map.info.present(), "notes": new_map.info.notes}
    finally:
        prepared.restore()
    direct = jacobiscope.looped_block(model, ids[1:], layer=2)
    assert torch.equal(_trajectory(items[1].maps[1]), _trajectory(direct))


def test_attention_maps_carry_eta_and_equal_looped_block():
    model, ids = tiny_model("gpt2"), tiny_inputs("gpt2")
    with map_source(model, ids, mode="attention", eta=0.5, layers=[1]) as source:
        (item,) = source
    (looped,) = item.maps
    assert looped.info.eta == 0.5 and looped.info.mode == "attention" and item.provenance.eta == 0.5
    direct = jacobiscope.looped_block(model, ids, layer=1, mode="attention", eta=0.5)
    assert torch.equal(_trajectory(looped), _trajectory(direct))


def _albert():
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=5,
                                       num_attention_heads=2, intermediate_size=24)
    return transformers.AlbertModel(config).eval()


def test_native_loop_maps_equal_native_loop():
    model, ids = _albert(), torch.tensor([[3, 5, 7, 9], [2, 4, 6, 8]])
    with map_source(model, ids) as source:
        items = list(source)
    assert source.plan.mode == "loop" and source.plan.recurrence == "loop" and source.plan.found is None
    for index, item in enumerate(items):
        (looped,) = item.maps
        assert looped.info.loops == 5 and looped.info.layer == 0 and looped.info.recurrence == "loop"
        assert item.provenance.adapter == "native recurrence 'loop'" and item.provenance.blocks == 1
        direct = jacobiscope.native_loop(model, {"input_ids": ids[index : index + 1]})
        assert torch.equal(_trajectory(looped), _trajectory(direct))


@pytest.fixture(scope="module")
def itrsa():
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku

    torch.manual_seed(0)
    return ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3)).eval()


PUZZLES = ["0" * 81, "1" + "0" * 80]


def test_reference_solver_maps_equal_its_old_loop_map(itrsa):
    from jacobiscope.models.itrsa.modeling_itrsa import _ItrSALoop

    with map_source(itrsa, PUZZLES) as source:
        items = list(source)
    assert source.plan.own_loop and source.plan.recurrence == "loop" and len(items) == 2
    for item in items:
        (looped,) = item.maps
        ids = item.inputs["input_ids"]
        # The map loop_map built before the protocol: the model's one loop, x0 its initial state, batch_dims=1.
        step = _ItrSALoop(itrsa, ids)
        with torch.no_grad():
            x0 = itrsa.initial_state(itrsa.injection(ids))
        old = jacobiscope.LoopedMap(step, batch_dims=1, drive=step.drive, x0=x0)
        assert torch.equal(_trajectory(looped), _trajectory(old))
        assert torch.equal(looped.drive(looped.x0), old.drive(x0))  # the pseudo-energy's drive, too
        assert looped.batch_dims == 1 and looped.info.eta == itrsa.config.eta and looped.info.loops == 3
        assert callable(looped.info.readout) and looped.info.quality(looped.x0) in (0.0, 1.0)
        assert torch.equal(_trajectory(itrsa.loop_map(ids)), _trajectory(old))  # the convenience: the same map
    assert items[0].provenance.adapter == "native recurrence 'loop'" and items[0].provenance.eta == itrsa.config.eta


def test_reference_solvers_speak_the_public_protocol(itrsa):
    from jacobiscope.models import AKOrNConfig, AKOrNForSudoku

    assert jacobiscope.list_recurrences(itrsa) == ["loop"]
    torch.manual_seed(0)
    akorn = AKOrNForSudoku(AKOrNConfig(hidden_size=16, oscillator_dim=4, num_heads=2, loops=2)).eval()
    ids = akorn.loop_inputs(PUZZLES[:1])
    protocol = akorn.jacobiscope_recurrence("loop", ids, seed=3)
    assert protocol["batch_dims"] == 1 and protocol["loops"] == 2
    looped = jacobiscope.native_loop(akorn, {"input_ids": ids, "seed": 3})
    assert torch.equal(looped.x0, protocol["x0"]) and torch.equal(akorn.loop_map(ids, seed=3).x0, protocol["x0"])
    with pytest.raises(AdapterError, match=r"AKOrNForSudoku has no recurrence 'lop'.*did you mean 'loop'"):
        jacobiscope.native_loop(akorn, {"input_ids": ids}, recurrence="lop")


def test_the_whole_batch_as_one_input():
    model, ids = tiny_model("gpt2"), tiny_inputs("gpt2", batch=3)
    with map_source(model, ids, layers=[1], split=False) as source:
        (item,) = source
    assert item.label == "batch of 3" and item.maps[0].x0.shape[0] == 3
    separate = [jacobiscope.looped_block(model, ids[i : i + 1], layer=1) for i in range(3)]
    batched = _trajectory(item.maps[0])
    for i, looped in enumerate(separate):
        assert torch.allclose(batched[:, i : i + 1], _trajectory(looped), atol=1e-6)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, RuntimeError])
def test_the_model_is_restored_however_the_block_ends(interrupt):
    model = tiny_model("gpt2").train()
    with pytest.raises(interrupt):
        with map_source(model, tiny_inputs("gpt2")) as source:
            assert not model.training  # eval mode while the maps are built
            next(iter(source))
            raise interrupt("stop")
    assert model.training


def test_bad_inputs_restore_the_model_too():
    model = tiny_model("gpt2").train()
    with pytest.raises(ArgumentError, match="input_labels has 1 names for 2 inputs"):
        with map_source(model, tiny_inputs("gpt2", batch=2), input_labels=["one"]):
            pass
    assert model.training


def test_choices_are_checked_before_the_inputs():
    model = tiny_model("gpt2")
    with pytest.raises(ArgumentError, match=r"layers names block 2 more than once \(2, -1\)"):
        plan_maps(model, layers=[2, -1])
    with pytest.raises(ArgumentError, match=r"mode='loop' needs a model with a recurrence of its own"):
        with map_source(model, object(), mode="loop"):  # the inputs are never read: the mode fails first
            pass


def test_maps_are_moved_to_the_device_and_cast():
    model, ids = tiny_model("gpt2"), tiny_inputs("gpt2")
    with map_source(model, ids, layers=[0], dtype=torch.float64, device="cpu") as source:
        (looped,) = source[0].maps
    assert looped.x0.dtype == torch.float64 and looped(looped.x0).dtype == torch.float64
