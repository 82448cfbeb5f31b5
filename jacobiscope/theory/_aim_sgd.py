"""Online SGD of the attention-indexed student on a teacher: every link and parameterization, batched (B.1, B.4)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentError
from ._aim_checks import count, finite, square
from ._aim_model import LINKS, PARAMETERIZATIONS, order_parameters
from ._aim_sgd_rule import _UpdateRule
from ._aim_sgd_students import _STUDENTS


@dataclass
class AIMRun:
    """What `online_sgd` returns.

    Attributes:
        times: ``[K]`` gradient-flow times ``steps * eta / d^2`` of the records.
        steps: ``[K]`` SGD steps (samples) of the records.
        order: `order_parameters` at each record (each ``[K, *runs]``).
        S: final student matrix ``[*runs, d, d]``; params: final parameters (``S``, ``W`` or ``(U, V)``).
        escape_time: ``[*runs]`` first recorded time with weak recovery (``inf`` if never).
    """

    times: torch.Tensor
    steps: torch.Tensor
    order: dict
    S: torch.Tensor
    params: object
    escape_time: torch.Tensor


def online_sgd(S_star: torch.Tensor, *, link: str = "he2", parameterization: str = "tied", steps: int = 1000,
               eta: float = 0.05, lr: float | None = None, rank: int | None = None, init_scale: float = 0.5,
               S0: torch.Tensor | None = None, params0=None, weight_decay: float = 0.0, clip: float | None = None,
               runs: int | None = None, record_every: int = 100, recovery_threshold: float = 0.3,
               seed: int = 0, tokens: int = 2, centering: bool = False) -> AIMRun:
    """Online SGD (one fresh sample per step) of the student on the teacher ``S*``, batched over runs.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import online_sgd
        >>> run = online_sgd(torch.zeros(6, 6), link="he2", parameterization="direct", S0=torch.zeros(6, 6), steps=50)
        >>> bool((run.S == 0).all())          # S = 0 is an exact critical point of He2: every gradient vanishes
        True
        >>> soft = online_sgd(torch.eye(6), link="softmax", parameterization="direct", S0=torch.zeros(6, 6), steps=50)
        >>> bool((soft.S != 0).any())         # ... but not of the softmax link, whose first Hermite part is not 0
        True

    Arguments:
        S_star: teacher ``[d, d]`` (or ``[*runs, d, d]``).
        link: ``"he1"``, ``"he2"``, ``"he3"`` (scalar label ``f(h)``, ``h = H_12``) or ``"softmax"`` (the label is
            the row softmax of the ``L x L`` pre-activation matrix ``H(S*)`` and the loss is
            ``(1/L^2) ||softmax(H(S)) - softmax(H(S*))||_F^2``, `preactivations`).
        parameterization: ``"direct"`` (``S``), ``"tied"`` (``S = kappa W W^T``) or ``"untied"``
            (``S = kappa U V^T``), ``kappa = 1/sqrt(r d)``.
        steps: samples; eta: ODE-time-consistent rate: ``lr = eta / d`` (direct) or ``eta sqrt(r / d)``
            (tied, untied), so one sample advances gradient-flow time by ``eta / d^2``.
        lr: the raw learning rate instead of ``eta`` (the other convention; ``times`` then use the implied eta).
        rank: ``r`` (default ``d``).
        init_scale: ``sigma_0``: ``W0``, ``U0``, ``V0`` iid ``N(0, sigma_0^2)``; direct starts from a GOE of scale
            ``sigma_0`` unless ``S0`` is given.
        S0: direct initial ``S`` (e.g. zeros: an exact critical point of He2).
        params0: tied / untied initial parameters instead of the random ones: ``W0 [d, r]`` (tied) or
            ``(U0, V0)`` (untied), broadcast over the runs.
        weight_decay: ``gamma``: ``theta <- (1 - lr gamma) theta - lr grad``.
        clip: clip the Frobenius norm of each parameter's one-sample gradient to this (He2/He3 gradients are
            polynomial in ``h`` and SGD diverges for large steps, spec B.4). Clipping biases the drift when the
            gradients are heavy-tailed: for He3 at ``S = 0`` the drift ``-6 S*^3 / d`` (in flow time, ``rho = 1``)
            is carried by the tail, and clipping the few percent largest gradients (``clip = 20`` at d = 24)
            reverses its sign.
        runs: independent runs (a leading batch; default: the teacher's batch, or one run).
        record_every: record order parameters every this many steps.
        recovery_threshold: weak-recovery threshold for ``escape_time`` (``|cos_c|`` for He2).
        seed: seed of initialization and samples.
        tokens: ``L``, tokens per sample of the softmax link (the elementwise links use ``L = 2``).
        centering: subtract ``d^{-1/2} Tr S`` from the diagonal of ``H`` (softmax link only: the off-diagonal
            ``h = H_12`` of the elementwise links is unaffected). Use it when ``Tr S*`` is ``O(d)`` (a PSD teacher):
            otherwise the diagonal pre-activations are ``O(sqrt d)`` and the softmax saturates.

    Returns:
        `AIMRun`.

    Softmax: with ``E = 2 (Y - Y*) / L^2`` and the softmax backward ``G = Y * (E - rowsum(E * Y))``, the
    one-sample gradient is ``grad_S = d^{-1/2} (X^T G X - c tr(G) I)``; tied ``grad_W = kappa (grad_S + grad_S^T) W``
    and untied ``grad_U = kappa grad_S V``, ``grad_V = kappa grad_S^T U`` are formed through ``X W`` (``O(L d r)``).
    The learning-rate conventions are those of the elementwise links, so ``times`` are again gradient-flow times
    of the (Monte Carlo) population loss, ``population_gradient(..., "softmax")``.

    Per-step cost ``O(d r)`` with ``c = 2 (f(h) - y) f'(h) d^{-1/2}``: direct ``S -= lr c x1 x2^T``; tied
    ``W -= lr c kappa (x1 a2^T + x2 a1^T)``, ``a_i = W^T x_i``; untied ``U -= lr c kappa x1 (V^T x2)^T``,
    ``V -= lr c kappa x2 (U^T x1)^T``.

    References: theory spec B.1 (parameterizations, learning rates), B.4, B.5.
    """
    _check_sgd_arguments(S_star, link=link, parameterization=parameterization, tokens=tokens, clip=clip,
                         steps=steps, record_every=record_every)
    square(S_star, "S_star")
    if lr is None:
        finite(eta, "eta", low=0, example="0.05")
    else:
        finite(lr, "lr", low=0, example="0.01")
    finite(init_scale, "init_scale", low=0, open_low=False, example="0.5")
    finite(weight_decay, "weight_decay", low=0, open_low=False, example="0.0")
    finite(recovery_threshold, "recovery_threshold", low=0, high=1, example="0.3")
    if runs is not None:
        count(runs, "runs", "2")
    if rank is not None:
        count(rank, "rank", "4")
    dtype, device = S_star.dtype, S_star.device
    d = S_star.shape[-1]
    student = _STUDENTS[parameterization](d, d if rank is None else int(rank))
    batch = tuple(S_star.shape[:-2]) if runs is None else (int(runs),)
    T = S_star.expand(*batch, d, d)
    if lr is None:
        lr = student.lr_from_eta(eta)
    else:
        eta = student.eta_from_lr(lr)
    draw = _seeded_normal(seed, dtype, device)
    params = student.initial(draw, batch, init_scale, S0, params0, dtype, device)
    records = _Records(T)
    records.add(0, student.student(params))
    rule = _UpdateRule(
        T=T, batch=batch, d=d, link=link, lr=lr, decay=1.0 - lr * weight_decay, clip=clip, centering=centering,
        tokens=tokens, draw=draw, dtype=dtype, device=device,
        eye_d=torch.eye(d, dtype=dtype, device=device) if centering and parameterization == "direct" else None,
    )
    for step in range(1, steps + 1):
        params = rule.step(student, params)
        if step % record_every == 0:
            records.add(step, student.student(params))
    times, step_tensor, order = records.stacked(eta, d, dtype, device)
    escape = _escape_times(order["cos_c"], times, link, recovery_threshold)
    out_params = params[0] if len(params) == 1 else tuple(params)
    return AIMRun(times, step_tensor, order, student.student(params), out_params, escape)


def _check_sgd_arguments(S_star, *, link, parameterization, tokens, clip, steps, record_every):
    if parameterization not in PARAMETERIZATIONS:
        raise ArgumentError(f"parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}.")
    if link not in LINKS:
        raise ArgumentError(f"link must be one of {LINKS}, got {link!r}.")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 2:
        raise ArgumentError(f"tokens (L) must be an int >= 2, got {tokens!r}.")
    if tokens != 2 and link != "softmax":
        raise ArgumentError(f"tokens = {tokens} needs link='softmax': the elementwise links use the scalar "
                            "model h = H_12 of L = 2 tokens.")
    if clip is not None and not (isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0):
        raise ArgumentError(f"clip must be a positive number or None, got {clip!r}.")
    if not isinstance(S_star, torch.Tensor) or S_star.dim() < 2 or S_star.shape[-1] != S_star.shape[-2]:
        raise ArgumentError("S_star must be a square teacher matrix tensor [d, d] (or [runs, d, d]).")
    for name, value in (("steps", steps), ("record_every", record_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"{name} must be a positive int, got {value!r}.")


def _seeded_normal(seed, dtype, device):
    """Standard normal draws from one generator seeded with ``seed``: the initial parameters, then the samples."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))

    def draw(*shape):
        # Seeded draws on the CPU so a seed means the same run on every device.
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    return draw


class _Records:
    """The order parameters of the student against the teacher ``T`` at the recorded steps."""

    def __init__(self, T):
        self.T = T
        self.values = {k: [] for k in ("Q", "m", "rho", "Q_tilde", "m_tilde", "mu", "mu_star", "cos_c")}
        self.steps = []

    def add(self, step, S):
        for k, v in order_parameters(S, self.T).items():
            self.values[k].append(v)
        self.steps.append(step)

    def stacked(self, eta, d, dtype, device):
        """``(times, steps, order)``: gradient-flow times ``steps * eta / d^2``, the steps, ``{name: [K, *runs]}``."""
        order = {k: torch.stack(v) for k, v in self.values.items()}
        step_tensor = torch.tensor(self.steps, dtype=dtype, device=device)
        return step_tensor * eta / d ** 2, step_tensor, order


def _escape_times(cos_c, times, link, threshold):
    """First recorded time of weak recovery per run (``|cos_c|`` for He2), ``inf`` if never."""
    cos = cos_c.abs() if link == "he2" else cos_c
    hit = torch.nan_to_num(cos, nan=0.0) >= threshold
    device = times.device
    first = torch.where(hit.any(0), hit.to(torch.int8).argmax(0), torch.full(hit.shape[1:], -1, device=device))
    return torch.where(first >= 0, times[first.clamp_min(0)], torch.full_like(times[0].expand(first.shape), math.inf))
