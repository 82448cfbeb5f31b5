"""Configuration of ItrSAForSudoku (the paper-form looped self-attention)."""
from transformers import PretrainedConfig


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
        mlp_ratio: 0 (the paper's attention-only ItrSA) or the hidden width ratio of a per-cell MLP added to the
            drive, ``Y = MSA(X) + MLP(X) + C`` (a looped post-norm transformer block).
    """

    model_type = "itrsa_sudoku"

    def __init__(self, hidden_size=128, num_heads=8, eta=1.0, loops=16, norm="rmsnorm", attention="standard",
                 attention_bias=False, mlp_ratio=0, norm_eps=1e-6, initializer_range=0.02, **kwargs):
        if norm not in ("rmsnorm", "layernorm", "none"):
            raise ValueError(f"norm must be 'rmsnorm', 'layernorm' or 'none', got {norm!r}.")
        if attention not in ("standard", "e_single", "e_multi"):
            raise ValueError(f"attention must be 'standard', 'e_single' or 'e_multi', got {attention!r}.")
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}.")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.eta = eta
        self.loops = loops
        self.norm = norm
        self.attention = attention
        self.attention_bias = attention_bias
        self.mlp_ratio = mlp_ratio
        self.norm_eps = norm_eps
        self.initializer_range = initializer_range
        super().__init__(**kwargs)
