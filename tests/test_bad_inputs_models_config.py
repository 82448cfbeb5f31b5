"""Bad checkpoint configs of the reference solvers (ItrSA, AKOrN): a non-finite or absurd hyper-parameter is refused
at load with the field and the fix — by direct construction, by ``from_pretrained`` of a folder whose config.json
was edited (the weights untouched), and by ``from_pretrained``'s keyword overrides — never met later as a NaN loss,
a diverged loop or an allocation that never ends."""
import json
import math
import shutil

import numpy as np
import pytest
import torch

from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

ITRSA_TINY = {"hidden_size": 8, "num_heads": 2, "loops": 2}
AKORN_TINY = {"hidden_size": 8, "oscillator_dim": 4, "num_heads": 2, "loops": 2}

ITRSA_BAD = {
    # field: value -> (fragment naming the problem)
    "eta-nan": ("eta", math.nan, "eta must be a finite number in (0, 1000], got nan"),
    "eta-inf": ("eta", math.inf, "eta must be a finite number in (0, 1000], got inf"),
    "eta-zero": ("eta", 0.0, "eta must be a finite number in (0, 1000], got 0.0"),
    "eta-negative": ("eta", -1.0, "got -1.0"),
    "eta-absurd": ("eta", 1e30, "got 1e+30"),
    "eta-str": ("eta", "1.0", "got '1.0'"),
    "hidden-zero": ("hidden_size", 0, "hidden_size must be an int in 1..16384, got 0"),
    "hidden-negative": ("hidden_size", -8, "got -8"),
    "hidden-absurd": ("hidden_size", 10**9, "got 1000000000"),
    "hidden-float": ("hidden_size", 8.0, "got 8.0"),
    "heads-zero": ("num_heads", 0, "num_heads must be an int in 1..16384, got 0"),
    "loops-zero": ("loops", 0, "loops must be an int in 1..100000, got 0"),
    "loops-absurd": ("loops", 10**12, "got 1000000000000"),
    "loops-bool": ("loops", True, "got True"),
    "mlp-ratio-negative": ("mlp_ratio", -1, "mlp_ratio must be an int in 0..64, got -1"),
    "mlp-ratio-float": ("mlp_ratio", 1.5, "got 1.5"),
    "norm-eps-zero": ("norm_eps", 0.0, "norm_eps must be a finite number in (0, 1], got 0.0"),
    "norm-eps-nan": ("norm_eps", math.nan, "got nan"),
    "init-range-negative": ("initializer_range", -0.02, "initializer_range must be a finite number in [0, 10]"),
    "attention-bias-str": ("attention_bias", "yes", "attention_bias must be true or false, got 'yes'"),
    "norm-typo": ("norm", "rmsnrom", "norm must be 'rmsnorm', 'layernorm' or 'none', got 'rmsnrom'"),
    "attention-typo": ("attention", "e-single", "attention must be 'standard', 'e_single' or 'e_multi'"),
}
AKORN_BAD = {
    "gamma-nan": ("gamma_init", math.nan, "gamma_init must be a finite number in [-1000, 1000], got nan"),
    "gamma-inf": ("gamma_init", -math.inf, "got -inf"),
    "omega-inf": ("omega_init", math.inf, "omega_init must be a finite number in [-1000, 1000], got inf"),
    "omega-absurd": ("omega_init", 1e9, "got 1000000000.0"),
    "oscillator-dim-zero": ("oscillator_dim", 0, "oscillator_dim must be an int in 2..16384, got 0"),
    "oscillator-dim-odd": ("oscillator_dim", 3, "oscillator_dim=3 must be even and divide hidden_size=8"),
    "heads-zero": ("num_heads", 0, "num_heads must be an int in 1..16384, got 0"),
    "heads-not-rotary": ("num_heads", 4, "hidden_size / num_heads = 2.0 must be a whole multiple of 4"),
    "loops-negative": ("loops", -16, "loops must be an int in 1..100000, got -16"),
    "hidden-zero": ("hidden_size", 0, "hidden_size must be an int in 1..16384, got 0"),
    "oscillator-norm-str": ("oscillator_norm", "false", "oscillator_norm must be true or false, got 'false'"),
    "unit-embeddings-int": ("unit_embeddings", 1, "unit_embeddings must be true or false, got 1"),
}


def _cases(table, family):
    return [pytest.param(family, *case, id=f"{family}-{name}", marks=pytest.mark.guards(
        "hang" if "absurd" in name else "silent" if any(word in name for word in ("nan", "inf", "str", "bool",
                                                                                   "float", "int")) else "internal"))
            for name, case in table.items()]


FAMILIES = {"itrsa": (ItrSAConfig, ItrSAForSudoku, ITRSA_TINY), "akorn": (AKOrNConfig, AKOrNForSudoku, AKORN_TINY)}


@pytest.mark.parametrize("family, field, value, problem", _cases(ITRSA_BAD, "itrsa") + _cases(AKORN_BAD, "akorn"))
def test_a_bad_field_is_refused_at_construction_with_the_field_and_the_fix(family, field, value, problem):
    config_class, _, tiny = FAMILIES[family]
    with pytest.raises(ArgumentError) as info:
        config_class(**{**tiny, field: value})
    assert problem in str(info.value) and "config.json" in str(info.value)
    assert isinstance(info.value, ValueError)  # what code catching transformers' config errors catches


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One tiny checkpoint folder per family (weights and config.json), saved once."""
    folders = {}
    for family, (config_class, model_class, tiny) in FAMILIES.items():
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(family)
        model_class(config_class(**tiny)).save_pretrained(folder)
        folders[family] = folder
    return folders


def _edited(saved, family, tmp_path, **changes):
    folder = tmp_path / family
    shutil.copytree(saved[family], folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    # json writes NaN / Infinity for non-finite floats: exactly what a hand edit or a broken export leaves
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("family, changes, problem", [
    pytest.param("itrsa", {"eta": math.nan}, "eta must be a finite number in (0, 1000], got nan", id="itrsa-eta-NaN",
                 marks=pytest.mark.guards("silent")),
    pytest.param("itrsa", {"eta": math.inf}, "got inf", id="itrsa-eta-Infinity", marks=pytest.mark.guards("silent")),
    pytest.param("itrsa", {"loops": 0}, "loops must be an int in 1..100000, got 0", id="itrsa-loops-zero",
                 marks=pytest.mark.guards("internal")),
    pytest.param("itrsa", {"num_heads": 3}, "hidden_size=8 must be divisible by num_heads=3", id="itrsa-heads-3",
                 marks=pytest.mark.guards("internal")),
    pytest.param("itrsa", {"hidden_size": -8}, "hidden_size must be an int in 1..16384, got -8",
                 id="itrsa-hidden-negative", marks=pytest.mark.guards("internal")),
    pytest.param("akorn", {"gamma_init": math.nan}, "gamma_init must be a finite number", id="akorn-gamma-NaN",
                 marks=pytest.mark.guards("silent")),
    pytest.param("akorn", {"loops": 10**12}, "loops must be an int in 1..100000", id="akorn-loops-absurd",
                 marks=pytest.mark.guards("hang")),
    pytest.param("akorn", {"oscillator_dim": 3}, "oscillator_dim=3 must be even", id="akorn-oscillator-dim-odd",
                 marks=pytest.mark.guards("internal")),
])
def test_an_edited_config_json_is_refused_at_load(saved, tmp_path, family, changes, problem):
    _, model_class, _ = FAMILIES[family]
    folder = _edited(saved, family, tmp_path, **changes)
    with pytest.raises(ArgumentError) as info:
        model_class.from_pretrained(folder)
    assert problem in str(info.value) and "config.json" in str(info.value)


@pytest.mark.parametrize("family, override, problem", [
    pytest.param("itrsa", {"loops": 0}, "loops must be an int in 1..100000, got 0", id="itrsa-loops-zero",
                 marks=pytest.mark.guards("internal")),
    pytest.param("itrsa", {"eta": math.nan}, "eta must be a finite number", id="itrsa-eta-nan",
                 marks=pytest.mark.guards("silent")),
    pytest.param("akorn", {"gamma_init": math.inf}, "gamma_init must be a finite number", id="akorn-gamma-inf",
                 marks=pytest.mark.guards("silent")),
])
def test_a_bad_keyword_override_of_from_pretrained_is_refused(saved, family, override, problem):
    config_class, model_class, _ = FAMILIES[family]
    with pytest.raises(ArgumentError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        model_class.from_pretrained(saved[family], **override)


@pytest.mark.guards("silent")
def test_a_field_set_after_construction_is_checked_too():
    config = ItrSAConfig(**ITRSA_TINY)
    with pytest.raises(ArgumentError, match=r"eta must be a finite number in \(0, 1000\], got nan — set \"eta\": 1.0"):
        config.eta = math.nan
    assert config.eta == 1.0  # unchanged


@pytest.mark.guards("internal")
def test_a_valid_edit_still_loads_and_numpy_values_are_accepted(saved, tmp_path):
    folder = _edited(saved, "itrsa", tmp_path, loops=4, eta=0.5)
    model = ItrSAForSudoku.from_pretrained(folder)
    assert model.config.loops == 4 and model.config.eta == 0.5
    assert ItrSAConfig(hidden_size=np.int64(8), num_heads=2, loops=np.int32(3)).loops == 3
