"""Configuration of AKOrNForSudoku."""
import importlib
import math
import numbers
import sys

from transformers import PretrainedConfig


# Copied from jacobiscope.models.itrsa.configuration_itrsa._ConfigError (single-model-file policy)
def _ConfigError(message):
    """The library's ArgumentError (a ValueError) when jacobiscope is loaded, else ValueError: the Hub copy of this
    file must not import jacobiscope (transformers scans remote code for imports, and a Hub user may not have it)."""
    if "jacobiscope" in sys.modules:
        return importlib.import_module("jacobiscope.errors").ArgumentError(message)
    return ValueError(message)


# Copied from jacobiscope.models.itrsa.configuration_itrsa._int_field (single-model-file policy)
def _int_field(name, value, low, high, example):
    """An int field in ``low..high`` (numpy ints too, never a bool): an edited config.json is refused at load."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise _ConfigError(f"config field {name} must be an int in {low}..{high}, got {value!r} — set "
                           f"\"{name}\": {example} in config.json (or pass {name}={example})")
    return int(value)


# Copied from jacobiscope.models.itrsa.configuration_itrsa._real_field (single-model-file policy)
def _real_field(name, value, low, high, example, *, open_low=False):
    """A finite number in ``[low, high]`` (``(low, high]`` when ``open_low``): NaN, Inf or an absurd value is refused
    at load, not met as a NaN loss or a diverged loop."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
          and (value > low if open_low else value >= low) and value <= high)
    if not ok:
        interval = f"({low}, {high}]" if open_low else f"[{low}, {high}]"
        raise _ConfigError(f"config field {name} must be a finite number in {interval}, got {value!r} — set "
                           f"\"{name}\": {example} in config.json (or pass {name}={example})")
    return float(value) if not isinstance(value, numbers.Integral) else value


# Copied from jacobiscope.models.itrsa.configuration_itrsa._bool_field (single-model-file policy)
def _bool_field(name, value, example):
    if not isinstance(value, bool):
        raise _ConfigError(f"config field {name} must be true or false, got {value!r} — set \"{name}\": "
                           f"{str(example).lower()} in config.json (or pass {name}={example})")
    return value


#: field -> check of one value (also run when a field is set after construction: from_pretrained(..., loops=0)
#: applies its keyword arguments with setattr)
_FIELDS = {
    "hidden_size": lambda v: _int_field("hidden_size", v, 1, 16384, 128),
    "oscillator_dim": lambda v: _int_field("oscillator_dim", v, 2, 16384, 4),
    "num_heads": lambda v: _int_field("num_heads", v, 1, 16384, 8),
    "loops": lambda v: _int_field("loops", v, 1, 100_000, 16),
    "gamma_init": lambda v: _real_field("gamma_init", v, -1000, 1000, 1.0),
    "omega_init": lambda v: _real_field("omega_init", v, -1000, 1000, 0.5),
    "oscillator_norm": lambda v: _bool_field("oscillator_norm", v, False),
    "unit_embeddings": lambda v: _bool_field("unit_embeddings", v, False),
}


class AKOrNConfig(PretrainedConfig):
    """AKOrN hyper-parameters (the AKOrN repo's Sudoku run uses hidden_size=512, N=4, 8 heads, T=16; the default
    here is sized for CPU training).

    Example::

        >>> from jacobiscope.models import AKOrNConfig
        >>> AKOrNConfig(hidden_size=64).oscillator_dim
        4

    Arguments:
        hidden_size: channels per cell (``hidden_size / oscillator_dim`` oscillators).
        oscillator_dim: N, the dimension of each oscillator's sphere (even: Omega rotates channel pairs).
        num_heads: attention heads of the coupling J.
        loops: loops at training (``forward(loops=...)`` overrides).
        gamma_init: initial step size gamma (learnable).
        omega_init: initial natural frequency (learnable, one global value).
        oscillator_norm: RMS-normalize the drive y per oscillator with a learnable gain (our reading of the
            "oscillator-wise RMSNorm" variant of Tomihari & Karakida).
        unit_embeddings: add row, column and box embeddings to the conditioning c (off: the AKOrN repo, whose
            only positional signal is the attention's 2-D rotation, which cannot express "same box").
    """

    model_type = "akorn_sudoku"

    def __init__(self, hidden_size=128, oscillator_dim=4, num_heads=8, loops=16, gamma_init=1.0, omega_init=0.5,
                 oscillator_norm=False, unit_embeddings=False, **kwargs):
        values = {"hidden_size": hidden_size, "oscillator_dim": oscillator_dim, "num_heads": num_heads,
                  "loops": loops, "gamma_init": gamma_init, "omega_init": omega_init,
                  "oscillator_norm": oscillator_norm, "unit_embeddings": unit_embeddings}
        for field, value in values.items():
            _FIELDS[field](value)
        if oscillator_dim % 2 or hidden_size % oscillator_dim:
            raise _ConfigError(
                f"oscillator_dim={oscillator_dim} must be even and divide hidden_size={hidden_size} — set e.g. "
                "\"oscillator_dim\": 4 in config.json."
            )
        if hidden_size % num_heads or (hidden_size // num_heads) % 4:
            raise _ConfigError(f"hidden_size / num_heads = {hidden_size / num_heads} must be a whole multiple of 4 "
                               "(2-D rotary) — set num_heads so that hidden_size / num_heads is 4, 8, 16, ... (e.g. 8 "
                               "for 128) in config.json.")
        self.hidden_size = hidden_size
        self.oscillator_dim = oscillator_dim
        self.num_heads = num_heads
        self.loops = loops
        self.gamma_init = gamma_init
        self.omega_init = omega_init
        self.oscillator_norm = oscillator_norm
        self.unit_embeddings = unit_embeddings
        super().__init__(**kwargs)

    def __setattr__(self, key, value):
        # A field set after construction (from_pretrained's keyword overrides, config.loops = ...) is checked too.
        if key in _FIELDS:
            _FIELDS[key](value)
        super().__setattr__(key, value)
