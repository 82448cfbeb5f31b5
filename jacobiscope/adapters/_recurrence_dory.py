"""Nemotron Dory's own loop: ``h <- R(L2norm(h) + e)``, ``R`` the shared recurrent stack, ``e`` the injection.

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.DoryConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
    ...                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, n_input_layers=1,
    ...                                  n_output_layers=1, n_recurrent_loops=3)
    >>> model = transformers.DoryModel(config).eval()
    >>> looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2, 3, 4]])})
    >>> looped.info.loops, tuple(looped.x0.shape)
    (3, (1, 4, 16))

``DoryModel.forward`` runs the input layers once, sets ``e = norm(h_in)`` (the input section's output on the
sphere), then ``n_recurrent_loops`` times applies ``h <- norm(h) + e`` and every recurrent layer in order, then
the output layers. The state is the recurrent stack's output (what the next iteration consumes); the state
entering the first iteration is the input section's output ``h_in`` itself.

With an ``lm_head`` (``DoryForCausalLM``) the readout is the rest of the forward: the output layers (replayed with
the masks and rotary tables the model gave them), the final norm and ``lm_head`` (with its per-token logit scale).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from .capture import ReplayedModule, _like, capture_calls, hidden_state_of, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["DoryLoopStep", "DoryReadout", "dory_loop"]


class DoryLoopStep(nn.Module):
    """One iteration of Dory's recurrent section: ``h -> R(norm(h) + e)``, each shared layer replayed with the
    mask and rotary table the model gave it.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> step = DoryLoopStep(torch.nn.Identity(), [ReplayedModule(torch.nn.Identity(), (torch.zeros(2),), {})],
        ...                     torch.ones(2))
        >>> step(torch.zeros(2))
        tensor([1., 1.])
    """

    def __init__(self, norm: nn.Module, layers: list[ReplayedModule], injection: torch.Tensor):
        super().__init__()
        self.norm = norm
        self.layers = nn.ModuleList(layers)
        # A plain attribute, not a buffer: like the replayed masks it is data of this input, cast to the state's
        # dtype/device on each call, and never a parameter the map would differentiate or swap.
        self._injection = injection.detach()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(h) + _like(self._injection, h)
        for layer in self.layers:
            h = layer(h)
        return h


class DoryReadout(nn.Module):
    """``h -> lm_head(norm(output layers(h)))``: what ``DoryForCausalLM`` does to the recurrent stack's output.

    Example::

        >>> import torch
        >>> readout = DoryReadout([], torch.nn.Identity(), torch.nn.Linear(2, 3))
        >>> readout(torch.zeros(1, 2)).shape
        torch.Size([1, 3])
    """

    def __init__(self, layers: list[ReplayedModule], norm: nn.Module, head: nn.Module):
        super().__init__()
        self.layers, self.norm, self.head = nn.ModuleList(layers), norm, head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = in_dtype_of(self.head, h)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


@contextlib.contextmanager
def _first_output(module: nn.Module):
    """Record the output of ``module``'s first call during the block (``record[0]``)."""
    record: list[torch.Tensor] = []

    def hook(_module, _args, output):
        if not record:
            record.append(output.detach())

    handle = module.register_forward_hook(hook)
    try:
        yield record
    finally:
        handle.remove()


def _recurrent_section(model: nn.Module):
    """``(base model, its recurrent layers)``; `AdapterError` when the model has no recurrent section."""
    base = getattr(model, "base_model", model)
    if not (hasattr(base, "layers") and hasattr(base, "norm")):
        raise AdapterError(f"{type(model).__name__} has no Dory base model (layers and norm) to loop over")
    config = base.config
    start, count = int(config.n_input_layers), int(config.n_recurrent_layers)
    if count < 1:
        raise AdapterError(f"{type(model).__name__} has n_recurrent_layers = {count}: no recurrent section to loop")
    return base, list(base.layers[start:start + count])


def dory_loop(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """Dory's ``"loop"`` recurrence: the state is the recurrent stack's output, one step one pass of the stack.

    Example::

        >>> import torch, transformers
        >>> config = transformers.DoryConfig(vocab_size=50, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=8, n_input_layers=1,
        ...     n_output_layers=1)
        >>> recurrence = dory_loop(transformers.DoryModel(config).eval(), {"input_ids": torch.tensor([[1, 2]])})
        >>> recurrence.loops, recurrence.step(recurrence.x0).shape
        (2, torch.Size([1, 2, 16]))

    Everything the iteration reads besides the state is captured from the model's own run, not recomputed:
    the input of the final norm's first call (``h_in``, the state entering the first iteration) and its output
    (the injection ``e``), and each recurrent layer's masks, rotary tables and cache arguments (first loop; the
    model passes every loop the same ones when it runs without a cache).
    """
    base, layers = _recurrent_section(model)
    head = getattr(model, "lm_head", None)
    # The output layers are captured only for a readout (a model with a head): the same one forward, run further.
    output_layers = list(base.layers[base.config.num_hidden_layers - base.config.n_output_layers:]) if (
        isinstance(head, nn.Module) and base.config.n_output_layers > 0) else []
    with _first_output(base.norm) as injection:
        (norm_args, norm_kwargs), *calls = capture_calls(model, model_kwargs, [base.norm, *layers, *output_layers])
    layer_calls, output_calls = calls[:len(layers)], calls[len(layers):]
    if not injection:  # pragma: no cover - capture_calls stops only after the recurrent layers ran, so norm ran
        raise AdapterError(f"{type(model).__name__} never normalized its input section's output")
    replays = [ReplayedModule(layer, args, kwargs).eval() for layer, (args, kwargs) in zip(layers, layer_calls)]
    loops = int(base.config.n_recurrent_loops)
    readout = None
    if isinstance(head, nn.Module):
        outputs = [ReplayedModule(layer, args, kwargs) for layer, (args, kwargs) in zip(output_layers, output_calls)]
        readout = DoryReadout(outputs, base.norm, head).eval()
    return Recurrence(
        "loop", DoryLoopStep(base.norm, replays, injection[0]).eval(),
        hidden_state_of(norm_args, norm_kwargs).detach(), loops,
        f"h <- R(norm(h) + e) over the {len(layers)} shared recurrent layers, {loops} times", readout=readout)


register_recurrence("dory", "loop", dory_loop)
