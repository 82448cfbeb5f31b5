"""HRM-Text's own loops: the fast ``L`` cycle, the slow ``H`` update, and the full H-cycle on the pair.

Example::

    >>> import torch, transformers, jacobiscope
    >>> config = transformers.HrmTextConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                                     num_attention_heads=2, head_dim=8, H_cycles=2, L_cycles=3)
    >>> model = transformers.HrmTextModel(config).eval()
    >>> jacobiscope.list_recurrences(model)
    ['L', 'H', 'cycle']
    >>> looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[1, 2, 3, 4]])}, recurrence="cycle")
    >>> looped.info.loops, tuple(looped.x0.shape)
    (2, (1, 4, 32))

``HrmTextModel.forward`` sets ``z_H = inputs_embeds * embedding_scale`` and ``z_L = z_L_init`` (a frozen vector,
broadcast over the tokens), then ``H_cycles`` times runs ``L_cycles`` updates ``z_L <- L(z_L + z_H)`` followed by
one ``z_H <- H(z_H + z_L)``; ``L`` and ``H`` are stacks of decoder layers ending in a weightless RMSNorm. The
input enters only as the initial ``z_H``; ``z_L`` is never reset, it carries over from one H-cycle to the next.

So ``z_H`` alone is not autonomous across H-cycles (the next ``z_H`` depends on the ``z_L`` the previous cycle left,
which ``z_H`` does not determine). The three recurrences, each exact against the model for its configured count:

- ``"L"`` (default): state ``z_L``; step ``z_L -> L(z_L + z_H0)``, ``z_H0`` the slow state during the first
  H-cycle; x0 ``z_L_init``; loops ``L_cycles``.
- ``"H"``: state ``z_H``; step ``z_H -> H(z_H + z_L1)``, ``z_L1`` the fast state the first H update reads (the last
  L output of the first H-cycle); x0 ``z_H0``; loops 1 (the model moves ``z_L`` on after one H update).
- ``"cycle"``: state ``[z_L, z_H]`` concatenated along the feature dimension (``[..., 2 * hidden_size]``); step one
  full H-cycle; x0 ``[z_L_init, z_H0]``; loops ``H_cycles``. The model's true outer recurrence.

``HrmTextForCausalLM`` reads logits as ``lm_head(z_H)`` after the last H-cycle (the H stack ends in its own norm;
there is no other). Each recurrence's readout is the rest of the model's forward from its state, then that head,
so at the configured count it is the model's own output (`HrmReadout`):

- ``"cycle"``: ``lm_head(z_H)`` of the pair; nothing else follows the last H-cycle.
- ``"H"``: ``z_L`` held at ``z_L1`` as in the step, then the ``H_cycles - 1`` remaining H-cycles, then the head.
- ``"L"``: the first H-cycle's closing ``z_H <- H(z_H0 + z_L)``, the remaining H-cycles (``z_L`` carries over),
  then the head: the sweep asks how the final output changes when the first H-cycle's L loop stops at ``t``. The
  head is never applied to ``z_L`` itself, which the model never reads out.

A bare ``HrmTextModel`` (no ``lm_head``) gets no readout.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from .capture import ReplayedModule, _like, capture_calls, hidden_state_of, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["HeldPartnerStep", "HrmCycleStep", "HrmReadout", "hrm_low", "hrm_high", "hrm_cycle"]


class HeldPartnerStep(nn.Module):
    """One level's update with the other level held: ``x -> stack(x + partner)``.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> step = HeldPartnerStep(ReplayedModule(torch.nn.Identity(), (torch.zeros(2),), {}), torch.ones(2))
        >>> step(torch.ones(2))
        tensor([2., 2.])
    """

    def __init__(self, stack: ReplayedModule, partner: torch.Tensor):
        super().__init__()
        self.stack = stack
        # A plain attribute, not a buffer: data of this input, cast to the state's dtype/device on each call and
        # never a parameter the map would differentiate or swap.
        self._partner = partner.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ``state + partner`` in the model's own operand order (z_L + z_H in L, z_H + z_L in H).
        return self.stack(x + _like(self._partner, x))


class HrmCycleStep(nn.Module):
    """One full H-cycle on the pair ``[z_L, z_H]`` (concatenated along the last dimension).

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> half = ReplayedModule(torch.nn.Identity(), (torch.zeros(1),), {})
        >>> HrmCycleStep(half, half, low_cycles=2)(torch.tensor([1.0, 10.0]))   # z_L: 1 -> 11 -> 21; z_H: 31
        tensor([21., 31.])
    """

    def __init__(self, low: ReplayedModule, high: ReplayedModule, low_cycles: int):
        super().__init__()
        self.low, self.high, self.low_cycles = low, high, int(low_cycles)

    def forward(self, pair: torch.Tensor) -> torch.Tensor:
        z_low, z_high = pair.chunk(2, dim=-1)
        for _ in range(self.low_cycles):
            z_low = self.low(z_low + z_high)
        z_high = self.high(z_high + z_low)
        return torch.cat([z_low, z_high], dim=-1)


class HrmReadout(nn.Module):
    """``state -> lm_head(z_H)`` after the rest of the model's forward from a state of recurrence ``name``: the pair
    ``[z_L, z_H]`` that state leaves (see the module doc), then ``remaining`` full H-cycles.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> half = ReplayedModule(torch.nn.Identity(), (torch.zeros(1),), {})
        >>> readout = HrmReadout("L", HrmCycleStep(half, half, 1), 0, torch.nn.Identity(), torch.tensor([10.0]))
        >>> readout(torch.tensor([1.0]))   # z_H <- H(z_H0 + z_L) = 11, read out
        tensor([11.])
    """

    def __init__(self, name: str, cycle: HrmCycleStep, remaining: int, head: nn.Module,
                 held: torch.Tensor | None = None):
        super().__init__()
        self.name, self.cycle, self.remaining, self.head = name, cycle, int(remaining), head
        self._held = None if held is None else held.detach()  # z_H0 ("L") or z_L1 ("H"): data, as the partner

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        x = in_dtype_of(self.head, state)
        if self.name == "L":  # close the H-cycle the L loop ran in, as the model does
            pair = torch.cat([x, self.cycle.high(_like(self._held, x) + x)], dim=-1)
        elif self.name == "H":
            pair = torch.cat([_like(self._held, x), x], dim=-1)
        else:
            pair = x
        for _ in range(self.remaining):
            pair = self.cycle(pair)
        return self.head(pair.chunk(2, dim=-1)[1])


def _readout(model: nn.Module, c: dict, name: str) -> HrmReadout | None:
    """The recurrence's readout when the model has an ``lm_head`` (``HrmTextForCausalLM``), else None."""
    head = getattr(model, "lm_head", None)
    if not isinstance(head, nn.Module):
        return None
    held = {"L": c["z_high"], "H": c["z_low_at_high"]}.get(name)
    remaining = 0 if name == "cycle" else c["high_cycles"] - 1
    return HrmReadout(name, HrmCycleStep(c["low"], c["high"], c["low_cycles"]), remaining, head, held).eval()


@contextlib.contextmanager
def _outputs(module: nn.Module):
    """Record the output of every call of ``module`` during the block."""
    record: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _module, _args, output: record.append(output.detach()))
    try:
        yield record
    finally:
        handle.remove()


def _captured(model: nn.Module, model_kwargs: dict) -> dict:
    """What the model's own run hands its H/L stacks up to the first H update (one forward, stopped there).

    ``z_H0`` is the tensor the model passes its rotary embedding (the scaled input embeddings, whether it embedded
    ``input_ids`` or was given ``inputs_embeds``): it becomes the initial slow state in the very next statement.
    """
    base = getattr(model, "base_model", model)
    if not all(hasattr(base, name) for name in ("L_module", "H_module", "rotary_emb", "z_L_init")):
        raise AdapterError(f"{type(model).__name__} has no HRM-Text base model (L_module, H_module, z_L_init)")
    with _outputs(base.L_module) as low_outputs:
        (rotary_args, rotary_kwargs), low_call, high_call = capture_calls(
            model, model_kwargs, [base.rotary_emb, base.L_module, base.H_module])
    z_high = (rotary_args[0] if rotary_args else rotary_kwargs["x"]).detach()
    # The model's own expression for the initial fast state (a frozen parameter, broadcast over the tokens).
    z_low = base.z_L_init.to(dtype=z_high.dtype, device=z_high.device).expand_as(z_high).contiguous()
    low_cycles = int(base.config.L_cycles)
    if not torch.equal(hidden_state_of(*low_call), z_low + z_high) or len(low_outputs) != low_cycles:
        raise AdapterError(f"{type(model).__name__}'s forward does not run HRM's z_L <- L(z_L + z_H) from z_L_init "
                           "and the scaled embeddings: this transformers version changed the loop")
    return {"z_low": z_low.detach(), "z_high": z_high, "z_low_at_high": low_outputs[-1], "low_cycles": low_cycles,
            "high_cycles": int(base.config.H_cycles), "low": ReplayedModule(base.L_module, *low_call).eval(),
            "high": ReplayedModule(base.H_module, *high_call).eval()}


def hrm_low(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """The ``"L"`` recurrence: ``z_L -> L(z_L + z_H0)`` from ``z_L_init``, ``L_cycles`` times.

    Example::

        >>> import torch, transformers
        >>> config = transformers.HrmTextConfig(vocab_size=40, hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, head_dim=8, H_cycles=2, L_cycles=3)
        >>> recurrence = hrm_low(transformers.HrmTextModel(config).eval(), {"input_ids": torch.tensor([[1, 2]])})
        >>> recurrence.loops, recurrence.step(recurrence.x0).shape
        (3, torch.Size([1, 2, 16]))
    """
    c = _captured(model, model_kwargs)
    return Recurrence("L", HeldPartnerStep(c["low"], c["z_high"]).eval(), c["z_low"], c["low_cycles"],
                      f"z_L <- L(z_L + z_H) with z_H held at the scaled embeddings (the first H-cycle), "
                      f"{c['low_cycles']} times", readout=_readout(model, c, "L"))


def hrm_high(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """The ``"H"`` recurrence: ``z_H -> H(z_H + z_L1)`` from the scaled embeddings; once in the model."""
    c = _captured(model, model_kwargs)
    return Recurrence("H", HeldPartnerStep(c["high"], c["z_low_at_high"]).eval(), c["z_high"], 1,
                      "z_H <- H(z_H + z_L) with z_L held at the first H-cycle's last L output (the model applies it "
                      "once before z_L moves on; use 'cycle' for the H-cycle recurrence)",
                      readout=_readout(model, c, "H"))


def hrm_cycle(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """The ``"cycle"`` recurrence: one full H-cycle on ``[z_L, z_H]`` (last dim), ``H_cycles`` times."""
    c = _captured(model, model_kwargs)
    return Recurrence("cycle", HrmCycleStep(c["low"], c["high"], c["low_cycles"]).eval(),
                      torch.cat([c["z_low"], c["z_high"]], dim=-1), c["high_cycles"],
                      f"[z_L, z_H] -> one H-cycle ({c['low_cycles']} x z_L <- L(z_L + z_H), then z_H <- H(z_H + z_L)), "
                      f"{c['high_cycles']} times; the state concatenates z_L and z_H along the features",
                      readout=_readout(model, c, "cycle"))


register_recurrence("hrm_text", "L", hrm_low)
register_recurrence("hrm_text", "H", hrm_high)
register_recurrence("hrm_text", "cycle", hrm_cycle)
