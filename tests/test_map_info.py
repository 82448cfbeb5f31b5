"""`LoopedMap.info` (typed, what the package knows about a map) and `LoopedMap.meta` (the user's extras, through
which the known keys still read and write ``info``: code written against the old dict keeps working)."""
import pickle

import pytest
import torch

import jacobiscope
from jacobiscope.errors import ArgumentError
from jacobiscope.maps import KNOWN_KEYS, MapInfo
from hf_models import tiny_inputs, tiny_model


def _map():
    return jacobiscope.LoopedMap(torch.nn.Linear(3, 3).double())


def test_known_keys_through_meta_are_info():
    m = _map()
    m.meta["layer"] = 4
    m.meta.update(mode="block", tag="baseline")
    assert m.info.layer == 4 and m.info.mode == "block"
    assert dict(m.meta) == {"layer": 4, "mode": "block", "tag": "baseline"}
    assert m._extras == {"tag": "baseline"}  # only the user's own key is an extra
    m.info.loops = 12
    assert m.meta["loops"] == 12 and m.meta.get("eta", "absent") == "absent" and "eta" not in m.meta
    with pytest.raises(KeyError):
        m.meta["recurrence"]
    del m.meta["layer"], m.meta["tag"]
    assert m.info.layer is None and dict(m.meta) == {"mode": "block", "loops": 12}


def test_a_known_key_set_to_its_default_is_still_said():
    m = _map()
    m.meta["eta"] = None  # a block map says it has no step size: the key is there, as in the old dict
    assert "eta" in m.meta and m.meta["eta"] is None and list(m.meta) == ["eta"]
    m.meta["power"] = 1
    assert m.meta["power"] == 1 and len(m.meta) == 2


def test_assigning_a_dict_replaces_info_and_extras():
    m = _map()
    m.meta["tag"] = "old"
    m.meta = {"layer": 2, "unbatched_original": True, "note": "mine"}
    assert m.info.layer == 2 and m.info.unbatched_original is True and dict(m.meta) == {
        "layer": 2, "unbatched_original": True, "note": "mine"}
    with pytest.raises(ArgumentError, match="meta must be a dict, got list"):
        m.meta = ["layer", 2]


def test_copies_keep_their_own_info():
    m = _map()
    m.meta.update(layer=1, tag="x")
    cast = m.to(torch.float32)
    cast.info.layer, cast.meta["tag"] = 7, "y"
    assert m.info.layer == 1 and m.meta["tag"] == "x"  # `to` copies: the original is untouched
    twice = m.power(2)
    assert twice.info.power == 2 and twice.meta["power"] == 2 and m.info.power == 1 and "power" not in m.meta
    assert jacobiscope.maps.steps_per_loop(twice) == 2
    detached = m.detached()
    detached.meta["derivatives"] = "mine"
    assert m.info.derivatives == "mine"  # a detached view shares its map's info, as it shared the old dict


def test_info_fields_are_the_known_keys_and_pickle():
    info = MapInfo(layer=3, mode="attention", eta=0.5, notes=["switched"])
    assert set(info.present()) == {"layer", "mode", "eta", "notes"}
    assert set(KNOWN_KEYS) >= {"layer", "mode", "eta", "recurrence", "readout", "quality", "loops", "notes",
                               "unbatched_original", "derivatives", "power", "model", "adapter", "blocks_path"}
    copy = info.copy()
    copy.notes.append("more")
    assert info.notes == ["switched"]
    assert pickle.loads(pickle.dumps(info)) == info


def test_adapters_fill_info():
    looped = jacobiscope.looped_block(tiny_model("gpt2"), tiny_inputs("gpt2"), layer=-1)
    info = looped.info
    assert (info.model, info.layer, info.mode, info.eta, info.adapter, info.blocks_path) == (
        "GPT2Model", 2, "block", None, "gpt2", "h")
    assert looped.meta["layer"] == 2 and "eta" in looped.meta  # the old reads


def test_a_user_value_that_is_an_array_is_kept_whole():
    m = _map()
    m.meta["layer"] = torch.tensor([1, 2])
    assert "layer" in m.meta and torch.equal(m.meta["layer"], torch.tensor([1, 2]))


def test_a_wrapper_takes_a_copy_of_the_info_of_the_map_it_wraps():
    inner = _map()
    inner.meta.update(layer=5, mode="loop", tag="mine")
    outer = jacobiscope.LoopedMap(lambda x: inner(x)).copy_info_from(inner)
    outer.info.layer = 6
    assert (inner.info.layer, outer.info.layer, outer.info.mode, outer.meta["tag"]) == (5, 6, "loop", "mine")
