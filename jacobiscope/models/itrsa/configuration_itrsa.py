"""Configuration of ItrSAForSudoku (the paper-form looped self-attention)."""
import importlib
import math
import numbers
import sys

from transformers import PretrainedConfig


def _ConfigError(message):
    """The library's ArgumentError (a ValueError) when jacobiscope is loaded, else ValueError: the Hub copy of this
    file must not import jacobiscope (transformers scans remote code for imports, and a Hub user may not have it)."""
    if "jacobiscope" in sys.modules:
        return importlib.import_module("jacobiscope.errors").ArgumentError(message)
    return ValueError(message)


def _int_field(name, value, low, high, example):
    """An int field in ``low..high`` (numpy ints too, never a bool): an edited config.json is refused at load."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise _ConfigError(f"config field {name} must be an int in {low}..{high}, got {value!r} — set "
                           f"\"{name}\": {example} in config.json (or pass {name}={example})")
    return int(value)


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


def _bool_field(name, value, example):
    if not isinstance(value, bool):
        raise _ConfigError(f"config field {name} must be true or false, got {value!r} — set \"{name}\": "
                           f"{str(example).lower()} in config.json (or pass {name}={example})")
    return value


#: field -> check of one value (also run when a field is set after construction: from_pretrained(..., loops=0)
#: applies its keyword arguments with setattr)
_FIELDS = {
    "hidden_size": lambda v: _int_field("hidden_size", v, 1, 16384, 128),
    "num_heads": lambda v: _int_field("num_heads", v, 1, 16384, 8),
    "eta": lambda v: _real_field("eta", v, 0, 1000, 1.0, open_low=True),
    "loops": lambda v: _int_field("loops", v, 1, 100_000, 16),
    "mlp_ratio": lambda v: _int_field("mlp_ratio", v, 0, 64, 0),
    "norm_eps": lambda v: _real_field("norm_eps", v, 0, 1, 1e-6, open_low=True),
    "initializer_range": lambda v: _real_field("initializer_range", v, 0, 10, 0.02),
    "attention_bias": lambda v: _bool_field("attention_bias", v, False),
    "attend_self": lambda v: _bool_field("attend_self", v, True),
}


class ItrSAConfig(PretrainedConfig):
    """ItrSA hyper-parameters. All are configurable: the paper does not publish its values, so the defaults are
    sized to train on a CPU (the AKOrN repo's ItrSA uses 512 channels).

    Example::

        >>> from jacobiscope.models import ItrSAConfig
        >>> ItrSAConfig(hidden_size=64).num_heads
        8

    Arguments:
        hidden_size: channels per cell.
        num_heads: attention heads (``attention="e_single"`` uses one).
        eta: step size of ``X <- Norm(X + eta (MSA(X) + C))``.
        loops: loops at training (``forward(loops=...)`` overrides, for test-time scaling).
        norm: ``"rmsnorm"`` (the paper), ``"layernorm"`` or ``"none"``.
        attention: ``"standard"``, ``"e_single"`` or ``"e_multi"`` (the energy-constrained variants).
        attention_bias: biases in the standard attention's projections.
        attend_self: whether a cell's attention includes the cell itself. False masks the diagonal of the scores:
            with ``W_K = W_Q`` (``e_multi``) the diagonal ``q_i . q_i`` dominates its row and the cells barely mix;
            the mask keeps the scores symmetric, so the variant still admits an energy.
        mlp_ratio: 0 (the paper's attention-only ItrSA) or the hidden width ratio of a per-cell MLP added to the
            drive, ``Y = MSA(X) + MLP(X) + C`` (a looped post-norm transformer block).
    """

    model_type = "itrsa_sudoku"

    def __init__(self, hidden_size=128, num_heads=8, eta=1.0, loops=16, norm="rmsnorm", attention="standard",
                 attention_bias=False, mlp_ratio=0, norm_eps=1e-6, initializer_range=0.02, attend_self=True, **kwargs):
        if norm not in ("rmsnorm", "layernorm", "none"):
            raise _ConfigError(f"config field norm must be 'rmsnorm', 'layernorm' or 'none', got {norm!r} — set "
                               "\"norm\": \"rmsnorm\" in config.json (or pass norm='rmsnorm').")
        if attention not in ("standard", "e_single", "e_multi"):
            raise _ConfigError(f"config field attention must be 'standard', 'e_single' or 'e_multi', got "
                               f"{attention!r} — set \"attention\": \"standard\" in config.json (or pass "
                               "attention='standard').")
        values = {"hidden_size": hidden_size, "num_heads": num_heads, "eta": eta, "loops": loops,
                  "mlp_ratio": mlp_ratio, "norm_eps": norm_eps, "initializer_range": initializer_range,
                  "attention_bias": attention_bias, "attend_self": attend_self}
        for field, value in values.items():
            _FIELDS[field](value)
        if hidden_size % num_heads:
            raise _ConfigError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads} — set "
                               "num_heads to a divisor of hidden_size (e.g. 8 for 128) in config.json.")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.eta = eta
        self.loops = loops
        self.norm = norm
        self.attention = attention
        self.attention_bias = attention_bias
        self.attend_self = attend_self
        self.mlp_ratio = mlp_ratio
        self.norm_eps = norm_eps
        self.initializer_range = initializer_range
        super().__init__(**kwargs)

    def __setattr__(self, key, value):
        # A field set after construction (from_pretrained's keyword overrides, config.eta = ...) is checked too.
        if key in _FIELDS:
            _FIELDS[key](value)
        super().__setattr__(key, value)
