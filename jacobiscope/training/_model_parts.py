"""What the regularizers share: which modules are linear maps, what a model declares looped, the compute dtype."""
from __future__ import annotations

import torch
from torch import nn

_HALF = (torch.float16, torch.bfloat16)
# Leaf names of fused query/key/value projections: GPT-2 (Conv1D c_attn), AKOrN / ViT-style qkv, Phi-3, MPT/ModernBERT.
DEFAULT_FUSED = ("c_attn", "qkv", "qkv_proj", "Wqkv")


def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover - transformers is a dependency
        return ()
    return Conv1D


def _is_linear(module: nn.Module) -> bool:
    conv1d = _conv1d_class()
    if isinstance(module, nn.Linear) or (conv1d and isinstance(module, conv1d)):
        weight = getattr(module, "weight", None)
        return isinstance(weight, torch.Tensor) and weight.dim() == 2
    return False


def _declared(model: nn.Module, attribute: str) -> tuple[str, ...] | None:
    """A model's declaration of its looped submodules (``_looped_modules`` / ``_looped_attention``), or None."""
    value = getattr(model, attribute, None)
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    # Power iteration and the penalty in half precision lose the ~1e-3 differences the penalty is about.
    return torch.float32 if tensor.dtype in _HALF else tensor.dtype
