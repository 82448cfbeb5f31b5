"""State layouts: older families keep the hidden state time-major or channels-first inside their blocks.

Every map jacobiscope builds keeps its state batch-first ``[batch, tokens, hidden]`` (one trajectory per example,
tokens coupled within it). A block that takes ``[tokens, batch, hidden]`` (XLNet, FSMT) or
``[batch, hidden, tokens]`` (SqueezeBERT) is wrapped so the map sees the batch-first state and the block its own
layout; the Jacobian is the block's own, up to that fixed permutation of coordinates.
"""
from __future__ import annotations

import torch
from torch import nn

from .spec import AdapterError

__all__ = ["LAYOUTS", "to_batch_first", "from_batch_first", "LayoutReplay"]

LAYOUTS = ("batch_first", "time_major", "channels_first")


def _checked(layout: str) -> str:
    if layout not in LAYOUTS:
        raise AdapterError(f"state_layout must be one of {LAYOUTS}, got {layout!r} — fix the adapter spec.")
    return layout


def to_batch_first(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A block's own state as ``[batch, tokens, hidden]``.

    Example::

        >>> import torch
        >>> to_batch_first(torch.zeros(5, 2, 8), "time_major").shape
        torch.Size([2, 5, 8])
    """
    layout = _checked(layout)
    if layout == "batch_first" or x.dim() < 3:
        return x
    return x.transpose(0, 1) if layout == "time_major" else x.transpose(1, 2)


def from_batch_first(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``[batch, tokens, hidden]`` in the block's own layout (the inverse of `to_batch_first`)."""
    layout = _checked(layout)
    if layout == "batch_first" or x.dim() < 3:
        return x
    return x.transpose(0, 1) if layout == "time_major" else x.transpose(1, 2)


class LayoutReplay(nn.Module):
    """``X -> to_batch_first(block(from_batch_first(X)))``: a replayed block seen in the batch-first layout.

    Example::

        >>> import torch
        >>> replay = LayoutReplay(torch.nn.Identity(), "channels_first")
        >>> replay(torch.ones(1, 3, 4)).shape
        torch.Size([1, 3, 4])
    """

    def __init__(self, replay: nn.Module, layout: str):
        super().__init__()
        self.replay = replay
        self.layout = _checked(layout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # contiguous(): the blocks view() their input (XLNet's relative attention reshapes the time-major state).
        return to_batch_first(self.replay(from_batch_first(x, self.layout).contiguous()), self.layout)


def token_window(state: torch.Tensor, reported: torch.Tensor) -> slice | None:
    """The tokens of a block's ``state`` that a model reports as ``reported`` in its ``hidden_states``.

    Most models report the whole state (``slice(None)``). Some drop tokens the blocks carry: CPM-Ant its prompt
    (leading), Longformer its padding to the attention window (trailing). Returns the leading or trailing window
    closest to ``reported``, or ``None`` when the shapes do not allow one.

    Example::

        >>> import torch
        >>> state = torch.arange(12.).reshape(1, 6, 2)
        >>> token_window(state, state[:, 2:])
        slice(2, None, None)
    """
    if state.shape == reported.shape:
        return slice(None)
    if (state.dim() < 3 or state.dim() != reported.dim() or state.shape[0] != reported.shape[0]
            or state.shape[2:] != reported.shape[2:] or reported.shape[1] >= state.shape[1]):
        return None
    count = reported.shape[1]
    windows = (slice(state.shape[1] - count, None), slice(0, count))
    return min(windows, key=lambda window: float((state[:, window] - reported).abs().max()))
