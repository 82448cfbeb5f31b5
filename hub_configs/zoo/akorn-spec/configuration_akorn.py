"""Configuration of AKOrNForSudoku."""
from transformers import PretrainedConfig


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
        if oscillator_dim % 2 or hidden_size % oscillator_dim:
            raise ValueError(
                f"oscillator_dim={oscillator_dim} must be even and divide hidden_size={hidden_size}."
            )
        if (hidden_size // num_heads) % 4:
            raise ValueError(f"hidden_size / num_heads = {hidden_size / num_heads} must be a multiple of 4 (2-D rotary).")
        self.hidden_size = hidden_size
        self.oscillator_dim = oscillator_dim
        self.num_heads = num_heads
        self.loops = loops
        self.gamma_init = gamma_init
        self.omega_init = omega_init
        self.oscillator_norm = oscillator_norm
        self.unit_embeddings = unit_embeddings
        super().__init__(**kwargs)
