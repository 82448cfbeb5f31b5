"""Huginn / Raven's own loop: ``x <- R(adapter([x, e]))``, ``R`` the recurrent core, ``e`` the prelude's output,
from a random initial state; read by the coda.

Example::

    >>> import jacobiscope
    >>> jacobiscope.list_recurrences("huginn_raven")
    ['loop']

Huginn (tomg-group-umd/huginn-0125, ``model_type`` "huginn_raven", loaded with ``trust_remote_code=True``) follows
the Hub repo's ``raven_modeling_minimal.py``, read at GitHub seal-rg/recurrent-pretraining commit 0d9ed97
(recpre/raven_modeling_minimal.py). ``RavenForCausalLM.forward`` embeds the tokens (``transformer.wte``, scaled by
``emb_scale``), runs the ``transformer.prelude`` blocks once to get ``e``, draws the initial state ``x`` (a
truncated normal, or the ``input_states`` it is given), then ``num_steps`` times (``config.mean_recurrence`` in
eval mode) applies ``x <- core_block(adapter(cat([x, e], -1)))``; it then reads ``ln_f(x)`` through the
``transformer.coda`` blocks, ``ln_f`` again and ``lm_head``. The carried state is the core's output; ``e`` is
re-injected every step.

- state: the core's output ``[batch, tokens, n_embd]``; ``x0`` the model's own initial state on this forward
  (captured: a random draw — under `analyze`'s ``seed``, or torch's global random state for `native_loop` —
  unless ``inputs`` hold ``input_states``);
- step: ``adapter`` on ``[x, e]`` then every ``core_block`` block, replayed with the rotary table the model gave
  it; loops: ``num_steps`` from the inputs (an int, or the (no-grad, with-grad) pair: their sum), else
  ``config.mean_recurrence``;
- readout: ``lm_head(ln_f(coda(ln_f(x))))``: at the configured depth it is the model's logits.

A nonzero ``config.test_time_noise`` (random noise added before every step) makes the step random: refused. A
model whose modules differ from that layout is refused, naming what differs.
"""
from __future__ import annotations

import torch
from torch import nn

from .capture import ReplayedModule, _like, capture_calls, in_dtype_of
from .native import Recurrence, register_recurrence
from .spec import AdapterError

__all__ = ["HuginnCoreStep", "HuginnReadout", "huginn_loop", "HUGINN_SOURCE"]

#: The public code the recurrence follows (also in adapters/huginn_raven.json).
HUGINN_SOURCE = ("raven_modeling_minimal.py of the Hub repo tomg-group-umd/huginn-0125, as in github.com/seal-rg/"
                 "recurrent-pretraining commit 0d9ed974d253e16498edec5c0c0916fdef4eb339 (recpre/)")
_PARTS = ("wte", "prelude", "adapter", "core_block", "coda", "ln_f")
_PROTOCOL = ("give the model class jacobiscope_recurrences and jacobiscope_recurrence(name, **inputs) (the public "
             "protocol: jacobiscope.adapters.native, README 'Looped models through their own loop')")


class HuginnCoreStep(nn.Module):
    """One Huginn recurrence step: ``x -> core(adapter(cat([x, e], -1)))``, the core's blocks replayed.

    Example::

        >>> import torch
        >>> from jacobiscope.adapters.capture import ReplayedModule
        >>> adapter = torch.nn.Linear(4, 2)
        >>> step = HuginnCoreStep(adapter, [ReplayedModule(torch.nn.Identity(), (torch.zeros(2),), {})], torch.ones(2))
        >>> step(torch.zeros(2)).shape
        torch.Size([2])
    """

    def __init__(self, adapter: nn.Module, blocks: list[ReplayedModule], injection: torch.Tensor):
        super().__init__()
        self.adapter, self.blocks = adapter, nn.ModuleList(blocks)
        # A plain attribute, not a buffer: data of this input, cast to the state's dtype/device on each call.
        self._injection = injection.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.adapter(torch.cat([x, _like(self._injection, x)], dim=-1))
        for block in self.blocks:
            x = block(x)
        return x


class HuginnReadout(nn.Module):
    """``x -> lm_head(ln_f(coda(ln_f(x))))``, what ``RavenForCausalLM`` does to the state after its last step.

    Example::

        >>> import torch
        >>> readout = HuginnReadout(torch.nn.Identity(), [], torch.nn.Linear(2, 3))
        >>> readout(torch.zeros(1, 2)).shape
        torch.Size([1, 3])
    """

    def __init__(self, ln_f: nn.Module, coda: list[ReplayedModule], head: nn.Module):
        super().__init__()
        self.ln_f, self.coda, self.head = ln_f, nn.ModuleList(coda), head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_f(in_dtype_of(self.head, x))
        for block in self.coda:
            x = block(x)
        return self.head(self.ln_f(x)).float()


def _layout_differences(model: nn.Module) -> list[str]:
    """What in ``model`` differs from the Huginn layout the recurrence follows (empty when it matches)."""
    transformer = getattr(model, "transformer", None)
    if not isinstance(transformer, nn.ModuleDict):
        return [f"no ModuleDict 'transformer' (it has {type(transformer).__name__})"]
    differences = [f"no transformer.{name}" for name in _PARTS if name not in transformer]
    for name in ("prelude", "core_block", "coda"):
        if name in transformer and not isinstance(transformer[name], nn.ModuleList):
            differences.append(f"transformer.{name} is a {type(transformer[name]).__name__}, not a ModuleList")
    width = getattr(model.config, "n_embd", None)
    adapter = transformer["adapter"] if "adapter" in transformer else None
    if isinstance(adapter, nn.Linear) and width is not None and adapter.in_features != 2 * width:
        differences.append(f"transformer.adapter takes {adapter.in_features} features, not 2 * n_embd = {2 * width}")
    for name in ("n_embd", "mean_recurrence"):
        if not isinstance(getattr(model.config, name, None), int):
            differences.append(f"no config.{name} (an int)")
    if not isinstance(getattr(model, "lm_head", None), nn.Module):
        differences.append("no lm_head")
    return differences


def _loops(model: nn.Module, model_kwargs: dict) -> int:
    """The step count the model runs on these inputs: ``num_steps`` (int, or the pair's sum) else mean_recurrence."""
    steps = model_kwargs.get("num_steps")
    if steps is None:
        if model.training:
            raise AdapterError(f"{type(model).__name__} is in training mode, where it draws a random step count — "
                               "call model.eval(), or pass num_steps in the inputs")
        return int(model.config.mean_recurrence)
    if isinstance(steps, torch.Tensor) and steps.numel() == 1:
        return int(steps)
    if isinstance(steps, (tuple, list, torch.Tensor)):
        return int(sum(int(part) for part in steps))
    return int(steps)


def huginn_loop(model: nn.Module, model_kwargs: dict) -> Recurrence:
    """Huginn's ``"loop"`` recurrence (module docstring): the core's output, one step one core application.

    Example::

        >>> import jacobiscope
        >>> "loop" in jacobiscope.list_recurrences("huginn_raven")
        True

    The initial state and the injection are read from the adapter's first input in the model's own run (its
    first half is the state, its second the prelude's output ``e``); each block's rotary table from its first call.
    """
    differences = _layout_differences(model)
    if differences:
        raise AdapterError(f"{type(model).__name__} (model_type 'huginn_raven') does not match the Huginn layout the "
                           f"built-in 'loop' recurrence follows ({HUGINN_SOURCE}): {'; '.join(differences)} — "
                           f"{_PROTOCOL}")
    noise = float(getattr(model.config, "test_time_noise", 0) or 0)
    if noise > 0:
        raise AdapterError(f"{type(model).__name__} has config.test_time_noise = {noise}: every step adds random "
                           "noise, so the step is not a map — set model.config.test_time_noise = 0")
    loops = _loops(model, model_kwargs)
    parts = model.transformer
    core, coda = list(parts["core_block"]), list(parts["coda"])
    (adapter_args, _), *calls = capture_calls(model, model_kwargs, [parts["adapter"], *core, *coda])
    joined = adapter_args[0]
    width = joined.shape[-1] // 2
    x0, injection = joined[..., :width].detach().clone(), joined[..., width:].detach().clone()
    replays = [ReplayedModule(block, args, kwargs).eval() for block, (args, kwargs) in zip(core, calls)]
    coda_replays = [ReplayedModule(block, args, kwargs).eval() for block, (args, kwargs) in zip(coda, calls[len(core):])]
    return Recurrence(
        "loop", HuginnCoreStep(parts["adapter"], replays, injection).eval(), x0, loops,
        f"x <- R(adapter([x, e])) over the {len(core)} core blocks, {loops} times, e the prelude's output, from the "
        "model's own (random) initial state", readout=HuginnReadout(parts["ln_f"], coda_replays, model.lm_head).eval())


register_recurrence("huginn_raven", "loop", huginn_loop)
