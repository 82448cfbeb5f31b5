"""The online-SGD update shared by every parameterization: seeded sample draws, the link, clipping and decay.

`online_sgd` builds one `_UpdateRule` per call; a step draws one fresh sample per run, asks the parameterization
(`jacobiscope.theory._aim_sgd_students`) for the one-sample gradient of each parameter and applies
``theta <- (1 - lr gamma) theta - lr clip(grad)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._aim_model import link_function, preactivations


@dataclass
class _UpdateRule:
    """Everything a step needs besides the parameters: teacher, link, rates, clipping and the sample stream.

    Attributes:
        T: teacher expanded to ``[*batch, d, d]``; batch, d: the runs and the dimension.
        link: the link name; f, df: the elementwise link and its derivative (``None`` for softmax).
        lr, decay: the raw learning rate and the weight-decay factor ``1 - lr gamma``.
        clip: Frobenius-norm clip of each one-sample gradient (``None``: no clipping).
        centering, tokens: the softmax link's diagonal centring and ``L``.
        draw: the seeded sample stream (``draw(*shape)``, shared with the initialization); dtype, device: of the
            identities.
        scale: ``d^{-1/2}``; eye_L, eye_d: identities of the softmax link (``eye_d`` only for a centred direct
            student).
    """

    T: torch.Tensor
    batch: tuple
    d: int
    link: str
    lr: float
    decay: float
    clip: float | None
    centering: bool
    tokens: int
    draw: object
    dtype: torch.dtype
    device: torch.device
    eye_d: torch.Tensor | None
    f: object = field(init=False)
    df: object = field(init=False)
    scale: float = field(init=False)
    eye_L: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.f, self.df = (None, None) if self.link == "softmax" else link_function(self.link)
        self.scale = 1.0 / math.sqrt(self.d)
        self.eye_L = torch.eye(self.tokens, dtype=self.dtype, device=self.device)

    def clipped(self, grad):
        if self.clip is None:
            return grad
        norm = grad.norm(dim=(-2, -1), keepdim=True)
        return grad * torch.clamp(self.clip / norm.clamp_min(1e-300), max=1.0)

    def update(self, param, grad):
        """``(1 - lr gamma) theta - lr clip(grad)``."""
        return self.decay * param - self.lr * self.clipped(grad)

    def step(self, student, params):
        """One online-SGD step of every run on one fresh sample; returns the new parameters."""
        if self.link == "softmax":
            grads = student.softmax_grads(params, self.draw(*self.batch, self.tokens, self.d), self)
        else:
            x1, x2 = self.draw(*self.batch, self.d), self.draw(*self.batch, self.d)
            y = self.f(self.scale * (x1 * (self.T @ x2.unsqueeze(-1))[..., 0]).sum(-1))
            grads = student.hermite_grads(params, x1, x2, y, self)
        return [self.update(p, g) for p, g in zip(params, grads)]

    def softmax_backward(self, X, trace_S, raw_H):
        """``dl/dH`` of the softmax loss, one sample per run; ``raw_H`` is the student's ``X S X^T``."""
        Y_star = torch.softmax(preactivations(X, self.T, centering=self.centering), -1)
        if self.centering:
            raw_H = raw_H - trace_S[..., None, None] * self.eye_L
        Y = torch.softmax(self.scale * raw_H, -1)
        E = 2 * (Y - Y_star) / self.tokens ** 2
        return Y * (E - (E * Y).sum(-1, keepdim=True))


def _trace_of(G):
    return G.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None]
