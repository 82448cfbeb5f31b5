"""Test settings: offline hub, and one BLAS/torch thread (tiny matrices run up to 20x slower multi-threaded on
the shared 2-core machines)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def attention_map64():
    """A small random looped self-attention map (ItrSA form) in float64: 5 tokens x 8 dims, 2 heads, D=40."""
    import jacobiscope

    return jacobiscope.systems.self_attention_map(tokens=5, dim=8, heads=2, eta=0.8, injection=True,
                                                  weight_scale=1.5, seed=3, dtype=torch.float64)


def autograd_jacobian(function, x):
    """Independent dense reference: torch.autograd.functional.jacobian, flattened to [D_out, D_in]."""
    J = torch.autograd.functional.jacobian(function, x)
    return J.reshape(x.numel(), x.numel())
