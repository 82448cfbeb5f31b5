"""The student's parameterizations in online SGD: direct ``S``, tied ``S = kappa W W^T``, untied ``S = kappa U V^T``.

Each parameterization knows its learning-rate convention (one sample advances gradient-flow time by ``eta / d^2``),
its initial parameters, the student matrix they give and the one-sample gradient of each parameter, for the
elementwise (Hermite) links in ``O(d r)`` and for the row-softmax link in ``O(L d r)`` (formulas: `online_sgd`).
The shared update (draws, clipping, decay, the softmax backward) is `jacobiscope.theory._aim_sgd_rule._UpdateRule`,
passed in as ``rule``.
"""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError
from ._aim_sgd_rule import _trace_of


class _Direct:
    """The student matrix itself: ``S``, ``lr = eta / d``; a GOE start of scale ``sigma_0`` unless ``S0`` is given."""

    name = "direct"

    def __init__(self, d, r):
        self.d, self.r = d, r
        self.kappa = 1.0 / math.sqrt(r * d)

    def lr_from_eta(self, eta):
        return eta / self.d

    def eta_from_lr(self, lr):
        return lr * self.d

    def initial(self, draw, batch, init_scale, S0, params0, dtype, device):
        # params0 is for the factored students; the direct one ignores it.
        d = self.d
        if S0 is None:
            G0 = draw(*batch, d, d)
            S0 = init_scale * (G0 + G0.mT) / math.sqrt(2 * d)
        return [S0.to(dtype=dtype, device=device).expand(*batch, d, d).clone()]

    def student(self, params):
        return params[0]

    def hermite_grads(self, params, x1, x2, y, rule):
        S = params[0]
        scale, f, df = rule.scale, rule.f, rule.df
        h = scale * (x1 * (S @ x2.unsqueeze(-1))[..., 0]).sum(-1)
        c = 2 * (f(h) - y) * df(h) * scale
        return [c[..., None, None] * x1.unsqueeze(-1) * x2.unsqueeze(-2)]

    def softmax_grads(self, params, X, rule):
        S = params[0]
        scale = rule.scale
        G = rule.softmax_backward(X, S.diagonal(dim1=-2, dim2=-1).sum(-1), X @ S @ X.mT)
        grad = scale * (X.mT @ G @ X)
        if rule.centering:
            grad = grad - scale * _trace_of(G) * rule.eye_d
        return [grad]


class _Factored:
    """Shared by the tied and untied students: ``lr = eta sqrt(r / d)``, ``count`` iid ``N(0, sigma_0^2)`` factors
    ``[d, r]`` unless ``params0`` gives them."""

    name = ""
    count = 0
    wanted = ""

    def __init__(self, d, r):
        self.d, self.r = d, r
        self.kappa = 1.0 / math.sqrt(r * d)

    def lr_from_eta(self, eta):
        return eta * math.sqrt(self.r / self.d)

    def eta_from_lr(self, lr):
        return lr / math.sqrt(self.r / self.d)

    def initial(self, draw, batch, init_scale, S0, params0, dtype, device):
        d, r = self.d, self.r
        if params0 is not None:
            given = [params0] if isinstance(params0, torch.Tensor) else list(params0)
            if len(given) != self.count or not all(isinstance(p, torch.Tensor) and p.shape[-2:] == (d, r)
                                                   for p in given):
                raise ArgumentError(f"params0 for the {self.name} parameterization must be {self.wanted} with "
                                    f"d = {d}, r = {r}; got {_describe(params0)}.")
            params = [p.to(dtype=dtype, device=device).expand(*batch, d, r).clone() for p in given]
        else:
            params = [init_scale * draw(*batch, d, r) for _ in range(self.count)]
        if S0 is not None:
            raise ArgumentError(f"S0 sets the direct student only; pass params0 for the {self.name} one.")
        return params


class _Tied(_Factored):
    """``S = kappa W W^T``: ``grad_W = c kappa (x1 a2^T + x2 a1^T)``, ``a_i = W^T x_i``."""

    name = "tied"
    count = 1
    wanted = "a tensor W0 [d, r]"

    def student(self, params):
        return self.kappa * params[0] @ params[0].mT

    def hermite_grads(self, params, x1, x2, y, rule):
        W = params[0]
        scale, kappa, f, df = rule.scale, self.kappa, rule.f, rule.df
        a1, a2 = (x1.unsqueeze(-2) @ W)[..., 0, :], (x2.unsqueeze(-2) @ W)[..., 0, :]
        h = scale * kappa * (a1 * a2).sum(-1)
        c = (2 * (f(h) - y) * df(h) * scale * kappa)[..., None, None]
        return [c * (x1.unsqueeze(-1) * a2.unsqueeze(-2) + x2.unsqueeze(-1) * a1.unsqueeze(-2))]

    def softmax_grads(self, params, X, rule):
        W = params[0]
        scale, kappa = rule.scale, self.kappa
        A = X @ W
        G = rule.softmax_backward(X, kappa * (W * W).sum((-2, -1)), kappa * A @ A.mT)
        grad = scale * kappa * (X.mT @ ((G + G.mT) @ A))
        if rule.centering:
            grad = grad - 2 * scale * kappa * _trace_of(G) * W
        return [grad]


class _Untied(_Factored):
    """``S = kappa U V^T``: ``grad_U = c kappa x1 (V^T x2)^T``, ``grad_V = c kappa x2 (U^T x1)^T``."""

    name = "untied"
    count = 2
    wanted = "a pair (U0, V0) of [d, r] tensors"

    def student(self, params):
        return self.kappa * params[0] @ params[1].mT

    def hermite_grads(self, params, x1, x2, y, rule):
        U, Vm = params
        scale, kappa, f, df = rule.scale, self.kappa, rule.f, rule.df
        b1, b2 = (x1.unsqueeze(-2) @ U)[..., 0, :], (x2.unsqueeze(-2) @ Vm)[..., 0, :]
        h = scale * kappa * (b1 * b2).sum(-1)
        c = (2 * (f(h) - y) * df(h) * scale * kappa)[..., None, None]
        return [c * x1.unsqueeze(-1) * b2.unsqueeze(-2), c * x2.unsqueeze(-1) * b1.unsqueeze(-2)]

    def softmax_grads(self, params, X, rule):
        U, Vm = params
        scale, kappa = rule.scale, self.kappa
        A, B = X @ U, X @ Vm
        G = rule.softmax_backward(X, kappa * (U * Vm).sum((-2, -1)), kappa * A @ B.mT)
        grad_u = scale * kappa * (X.mT @ (G @ B))
        grad_v = scale * kappa * (X.mT @ (G.mT @ A))
        if rule.centering:
            grad_u = grad_u - scale * kappa * _trace_of(G) * Vm
            grad_v = grad_v - scale * kappa * _trace_of(G) * U
        return [grad_u, grad_v]


_STUDENTS = {cls.name: cls for cls in (_Direct, _Tied, _Untied)}


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return type(value).__name__
