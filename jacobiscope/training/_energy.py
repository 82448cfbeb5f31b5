"""Energy regularizers: the looped attention's weights (`attention_weights`) and their distance from the
E-single / E-multi energy-admitting constraints (`energy_penalty`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..adapters._offload import weight_of
from ..errors import ArgumentError
from ._model_parts import DEFAULT_FUSED, _compute_dtype, _conv1d_class, _declared, _is_linear
from .._validation import one_of

__all__ = ["AttentionWeights", "attention_weights", "energy_penalty"]


@dataclass
class AttentionWeights:
    """One attention's weights in the row-vector convention ``q = x A_Q``, ``k = x A_K``, output
    ``sum_h softmax(q_h k_h^T) x VO^h``.

    Attributes:
        name: the attention module's name.
        query, key: ``A_Q``, ``A_K`` of shape ``[d, heads * head_dim]`` (head ``h`` is column block ``h``; grouped
            key heads are repeated to match the query heads).
        value_output: ``[heads, d, d]``, the value map of each head followed by its slice of the output projection,
            ``VO^h = A_V[:, h] A_O[h, :]`` (identity output projection when the attention has none).
        heads: number of heads.
    """

    name: str
    query: torch.Tensor
    key: torch.Tensor
    value_output: torch.Tensor
    heads: int

    def head(self, matrix: torch.Tensor, h: int) -> torch.Tensor:
        size = matrix.shape[1] // self.heads
        return matrix[:, h * size : (h + 1) * size]


def _value_output(value: torch.Tensor, output: torch.Tensor | None, heads: int) -> torch.Tensor:
    """``[heads, d, d]`` from ``A_V [d, heads * dv]`` and ``A_O [heads * dv, d]``."""
    d, width = value.shape
    size = width // heads
    value_heads = value.reshape(d, heads, size).permute(1, 0, 2)  # [H, d, dv]
    if output is None:
        if width != d:
            raise ArgumentError(f"An attention without output projection needs a square value map, got {tuple(value.shape)}.")
        output = torch.eye(d, dtype=value.dtype, device=value.device)
    output_heads = output.reshape(heads, size, output.shape[1])  # [H, dv, d]
    return value_heads @ output_heads


def _matrix(module: nn.Module) -> torch.Tensor:
    """``A`` with ``y = x A`` for an nn.Linear (``weight.T``) or a Conv1D (``weight``)."""
    conv1d = _conv1d_class()
    weight = weight_of(module)   # read from the store when accelerate offloads it
    return weight if conv1d and isinstance(module, conv1d) else weight.t()


def _heads_of(model, attention, width) -> tuple[int, int]:
    config = getattr(model, "config", None)
    for owner, names in ((attention, ("num_heads", "num_attention_heads", "n_heads", "n_head")),
                         (config, ("num_attention_heads", "n_head", "num_heads", "n_heads"))):
        for name in names:
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                head_dim = getattr(attention, "head_dim", None) or width // value
                return width // head_dim, head_dim
    raise ArgumentError(f"Cannot tell the number of heads of {type(attention).__name__}: no num_heads attribute or config field.")


def _repeat_groups(matrix: torch.Tensor, head_dim: int, heads: int) -> torch.Tensor:
    groups = matrix.shape[1] // head_dim
    if groups == heads:
        return matrix
    if heads % groups:
        raise ArgumentError(f"{heads} query heads cannot share {groups} key/value heads evenly.")
    d = matrix.shape[0]
    return matrix.reshape(d, groups, 1, head_dim).expand(d, groups, heads // groups, head_dim).reshape(d, heads * head_dim)


_QKV_NAMES = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q_lin", "k_lin", "v_lin"))
_OUT_NAMES = ("o_proj", "out_proj", "c_proj", "output", "out_lin", "dense")


def _hf_attention(model, name: str, attention: nn.Module, output_module: nn.Module | None) -> AttentionWeights:
    children = dict(attention.named_children())
    fused = next((children[n] for n in DEFAULT_FUSED if n in children and _is_linear(children[n])), None)
    if fused is not None:
        combined = _matrix(fused)
        d = combined.shape[0]
        if combined.shape[1] != 3 * d:
            raise ArgumentError(f"The fused projection of {name} has shape {tuple(combined.shape)}; expected [d, 3d] (Q, K, V).")
        query, key, value = combined[:, :d], combined[:, d : 2 * d], combined[:, 2 * d :]
    else:
        names = next((triple for triple in _QKV_NAMES if all(n in children for n in triple)), None)
        if names is None:
            raise ArgumentError(
                f"Cannot find the query/key/value projections of {name} ({type(attention).__name__}; children "
                f"{sorted(children)}): energy regularizers know fused c_attn/qkv and q_proj/k_proj/v_proj-style names."
            )
        query, key, value = (_matrix(children[n]) for n in names)
    if output_module is None:
        output_module = next((children[n] for n in _OUT_NAMES if n in children and _is_linear(children[n])), None)
    output = _matrix(output_module) if output_module is not None else None
    heads, head_dim = _heads_of(model, attention, query.shape[1])
    key, value = _repeat_groups(key, head_dim, heads), _repeat_groups(value, head_dim, heads)
    return AttentionWeights(name, query, key, _value_output(value, output, heads), heads)


def attention_weights(model: nn.Module) -> list[AttentionWeights]:
    """The looped attention(s) of a model as `AttentionWeights` (differentiable views of the live weights).

    Example::

        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import attention_weights
        >>> [w] = attention_weights(ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2)))
        >>> w.name, w.heads, tuple(w.value_output.shape)
        ('attention', 2, (2, 16, 16))

    A model that declares ``_looped_attention`` (submodule names, like transformers' ``_no_split_modules``) is read
    there: through the submodule's ``energy_weights()`` when it has one (`ItrSAForSudoku`: standard, ``e_single``,
    ``e_multi``), else by its projections' names (`AKOrNForSudoku`: fused qkv + output). Hugging Face blocks found by
    the adapters are read the same way (fused ``c_attn``/``qkv`` or ``q_proj``/``k_proj``/``v_proj``-style
    projections, grouped key/value heads repeated).
    """
    declared = _declared(model, "_looped_attention")
    if declared is not None:
        found = []
        for name in declared:
            attention = model.get_submodule(name)
            if callable(getattr(attention, "energy_weights", None)):
                maps = attention.energy_weights()
                found.append(AttentionWeights(name, maps["query"], maps["key"], maps["value_output"], maps["heads"]))
            else:
                found.append(_hf_attention(model, name, attention, None))
        return found
    from ..adapters.spec import find_blocks

    path, blocks, spec = find_blocks(model)
    if spec is None or spec.attention is None:
        raise ArgumentError(
            f"No adapter spec names the attention of {type(model).__name__}'s blocks; register one with "
            "jacobiscope.register_adapter(model_type, attention=..., attention_output=...)."
        )
    found = []
    for index, block in enumerate(blocks):
        attention = block.get_submodule(spec.attention)
        output = block.get_submodule(spec.attention_output) if spec.attention_output else None
        found.append(_hf_attention(model, f"{path}.{index}.{spec.attention}", attention, output))
    return found


def _sym(matrix):
    return 0.5 * (matrix + matrix.transpose(-1, -2))


def _skew(matrix):
    return 0.5 * (matrix - matrix.transpose(-1, -2))


def energy_penalty(model: nn.Module, kind: str = "e_single") -> torch.Tensor:
    """Distance of the looped attention's weights from an energy-admitting constraint (0 exactly on it).

    Example::

        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> from jacobiscope.training import energy_penalty
        >>> constrained = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=1, loops=2, attention="e_single"))
        >>> energy_penalty(constrained, "e_single").item()
        0.0
        >>> free = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> energy_penalty(free, "e_multi").item() > 0
        True

    Arguments:
        model: the model (`attention_weights` finds its attention(s); summed over them).
        kind: ``"e_single"`` or ``"e_multi"``.

    Returns:
        A differentiable scalar. Definitions (row-vector convention ``q = x A_Q``; ``VO^h = A_V^h A_O^h`` the value
        map of head ``h`` through its slice of the output projection; ``sym(M) = (M + M^T)/2``,
        ``skew(M) = (M - M^T)/2``; squared Frobenius norms):

        - ``e_single``: ``|| sum_h VO^h - sym(A_K A_Q^T) ||^2`` — the single-head energy condition (Tomihari &
          Karakida, Prop. 4.1 per the notes: ``W_V`` equal to the symmetric part of ``W_K W_Q^T``), applied to the
          whole attention read as one head (``A_Q A_K^T = sum_h`` of the heads' QK matrices). It is zero for
          `ItrSAForSudoku` with ``attention="e_single"``, whose value map is built that way.
        - ``e_multi``: ``sum_h ||skew(A_Q^h A_K^{h T})||^2 + ||skew(VO^h)||^2`` — each head's QK matrix (rank
          ``head_dim``, low-rank by construction) symmetric and each head's value map symmetric. It is zero for
          ``attention="e_multi"`` (keys tied to queries, symmetric value maps) up to rounding.

    Biases are left out (the conditions are on the bilinear forms). The paper found these constraints hurt Sudoku
    accuracy; the regularizers let you measure that trade-off.
    """
    one_of(kind, "kind", ("e_single", "e_multi"))
    terms = []
    for weights in attention_weights(model):
        query, key, value_output = (t.to(_compute_dtype(t)) for t in (weights.query, weights.key, weights.value_output))
        if kind == "e_single":
            target = _sym(key @ query.t())
            terms.append((value_output.sum(0) - target).square().sum())
        else:
            size = query.shape[1] // weights.heads
            d = query.shape[0]
            q_heads = query.reshape(d, weights.heads, size).permute(1, 0, 2)  # [H, d, dh]
            k_heads = key.reshape(d, weights.heads, size).permute(1, 0, 2)
            qk = q_heads @ k_heads.transpose(1, 2)  # [H, d, d]
            terms.append(_skew(qk).square().sum() + _skew(value_output).square().sum())
    return torch.stack(terms).sum()
