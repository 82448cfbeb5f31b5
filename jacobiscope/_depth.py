"""`depth_dynamics`: a non-looped model's forward pass across its layers as a non-autonomous map.

Example::

    >>> import torch, transformers, jacobiscope
    >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=20))
    >>> (depth,) = jacobiscope.depth_dynamics(model.eval(), torch.tensor([[1, 2, 3]]), k=2)
    >>> len(depth.layers), len(depth.exponents), len(depth.token_gain)
    (3, 2, 3)

Layer ``l`` maps the hidden state entering it to the one leaving it, ``X_{l+1} = F_l(X_l)`` (block mode, with the
arguments the model gave it). Its local expansion is ``||J_l||_2`` at ``X_l``; the finite-time Lyapunov spectrum of
the whole stack comes from ``k`` tangent vectors pushed through ``J_L ... J_1`` with a QR step after each layer
(``log |R_ii|`` per layer, averaged over the layers); the per-token gain is ``||J_L ... J_1 v||`` for a random unit
direction ``v`` on one input token — how far a nudge to that token travels. The paper's stated limitation
(non-looped transformers) measured with the same engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._validation import positive_int

__all__ = ["DepthDynamics", "depth_dynamics"]


@dataclass
class DepthDynamics:
    """One input's depth dynamics.

    Attributes:
        label: the input.
        layers: per layer ``{"layer", "spectral_norm", "log_stretch": [k]}`` (``log |R_ii|`` of that layer's QR
            step: how much the layer stretched the i-th tangent direction, in nats).
        exponents: the finite-time exponents of the stack, nats per layer (sum of ``log_stretch`` / layers).
        token_gain: ``||J_L ... J_1 v_i||`` for a random unit direction ``v_i`` on token ``i`` (the first
            ``token_limit`` tokens).
    """

    label: str
    layers: list = field(default_factory=list)
    exponents: list = field(default_factory=list)
    token_gain: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"label": self.label, "layers": self.layers, "exponents": self.exponents, "token_gain": self.token_gain}


def depth_dynamics(model, inputs, *, k: int = 4, tokenizer=None, max_length: int | None = 512, seed: int = 0,
                   dtype: torch.dtype | None = None, token_limit: int = 64) -> list[DepthDynamics]:
    """Measure the forward pass of ``model`` across its layers on each input; one `DepthDynamics` per input.

    Arguments:
        model, inputs, tokenizer, max_length: as for `jacobiscope.analyze`.
        k: tangent vectors for the finite-time Lyapunov spectrum (at most the state size).
        seed: of the random tangent frame and token directions.
        dtype: compute dtype (float64 for reference numbers).
        token_limit: per-token gains for at most this many tokens (one chain of jvps each).
    """
    from .adapters.inputs import prepare_inputs
    from .adapters.looped import build_maps, prepare_model
    from .adapters.spec import find_blocks

    positive_int(k, "k")
    prepared = prepare_model(model)
    try:
        examples = prepare_inputs(model, inputs, tokenizer, max_length=max_length).examples()
        _, blocks, _ = find_blocks(model)
        results = []
        for example in examples:
            maps = build_maps(prepared, example, list(range(len(blocks))), "block", None, dtype)
            results.append(_measure_depth(maps, str(example.labels[0]), k, seed, token_limit))
    finally:
        prepared.restore()
    return results


def _measure_depth(maps, label: str, k: int, seed: int, token_limit: int) -> DepthDynamics:
    from .linalg.operators import jacobian_matmat
    from .linalg.svd import spectral_norm

    x = maps[0].x0
    count = min(k, x[0].numel())
    generator = torch.Generator().manual_seed(seed)
    frame, _ = torch.linalg.qr(torch.randn(x[0].numel(), count, generator=generator, dtype=torch.float64))
    frame = frame.T.to(x.dtype).reshape(count, *x.shape)
    layers, total = [], torch.zeros(count, dtype=torch.float64)
    for looped in maps:
        state = looped.x0
        with torch.no_grad():  # jvps need no graph for the weights
            pushed = jacobian_matmat(looped.detached(), state, frame).reshape(count, -1)
        q, r = torch.linalg.qr(pushed.T.to(torch.float64))
        stretch = r.diagonal().abs().clamp_min(1e-300).log()
        total += stretch
        frame = (q * torch.sign(r.diagonal())).T.to(x.dtype).reshape(count, *state.shape)
        sigma = float(spectral_norm(looped, state, tol=1e-3, seed=seed).value.reshape(-1)[0])
        layers.append({"layer": int(looped.meta.get("layer", len(layers))), "spectral_norm": sigma,
                       "log_stretch": stretch.tolist()})
    gains = _token_gains(maps, generator, token_limit)
    return DepthDynamics(label=label, layers=layers, exponents=(total / len(maps)).tolist(), token_gain=gains)


def _token_gains(maps, generator, token_limit: int) -> list[float]:
    from .linalg.operators import jacobian_matmat

    x = maps[0].x0
    if x.dim() < 3:
        return []
    tokens = min(x.shape[1], token_limit)
    directions = torch.zeros(tokens, *x.shape, dtype=torch.float64)
    for token in range(tokens):
        direction = torch.randn(x.shape[-1], generator=generator, dtype=torch.float64)
        directions[token, :, token] = direction / direction.norm()
    directions = directions.to(x.dtype)
    for looped in maps:
        with torch.no_grad():
            directions = jacobian_matmat(looped.detached(), looped.x0, directions)
    return [float(v) if math.isfinite(float(v)) else math.nan
            for v in directions.reshape(tokens, -1).norm(dim=1)]
