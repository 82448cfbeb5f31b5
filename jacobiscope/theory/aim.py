"""Attention-indexed model (AIM): online-SGD learning dynamics of a minimal teacher–student attention model.

Theory spec, Part B. Tokens ``x_1, x_2 ~ N(0, I_d)`` (``L = 2``), one head, a scalar label
``y = f(h*)`` with pre-activation ``h(S) = d^{-1/2} x_1^T S x_2`` and link ``f`` in ``{He1, He2, He3}`` (or a
row softmax of the ``2 x 2`` pre-activation matrix). The student's ``S`` is parameterized directly, tied
(``S = kappa W W^T``) or untied (``S = kappa U V^T``), ``kappa = 1 / sqrt(r d)``, and trained by online SGD on
the square loss with learning rates chosen so that one sample advances gradient-flow time by ``eta / d^2``.

Shipped: the links, one-sample gradients in ``O(d r)`` (``O(L d r)`` for the row softmax over ``L`` tokens),
batched online SGD for every link and parameterization (optional clipping, weight decay and both learning-rate
conventions), teachers and the escape-from-an-uninformative-start experiment (`make_teacher`, `escape_runs`), order
parameters and the weak-recovery criterion (centred cosine), population losses (exact for He1/He2, Gaussian limit
for He3, Monte Carlo for softmax) and their gradients, the matrix gradient-flow ODEs, and the spectral Galerkin
truncation of the tied moment hierarchy with its error against truncation order ``M``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentError

__all__ = [
    "LINKS",
    "PARAMETERIZATIONS",
    "link_function",
    "preactivations",
    "order_parameters",
    "centered_cosine",
    "weak_recovery",
    "population_loss",
    "population_gradient",
    "AIMRun",
    "online_sgd",
    "gradient_flow",
    "population_loss_from",
    "marchenko_pastur_spectrum",
    "spectral_closure",
    "truncation_errors",
    "make_teacher",
    "escape_runs",
]

LINKS = ("he1", "he2", "he3", "softmax")
PARAMETERIZATIONS = ("direct", "tied", "untied")
_SQRT2, _SQRT6 = math.sqrt(2.0), math.sqrt(6.0)


# ---------------------------------------------------------------------------------------------------- model
def link_function(link: str):
    """``(f, f')`` of an elementwise link: normalized Hermite polynomials He1, He2, He3.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import link_function
        >>> f, df = link_function("he2")
        >>> h = torch.tensor(2.0, dtype=torch.float64)
        >>> round(f(h).item() * 2 ** 0.5, 12), round(df(h).item() * 2 ** 0.5, 12)
        (3.0, 4.0)

    Arguments:
        link: ``"he1"`` (``h``), ``"he2"`` (``(h^2 - 1)/sqrt 2``) or ``"he3"`` (``(h^3 - 3h)/sqrt 6``).

    Returns:
        Two callables on tensors. (``"softmax"`` is not elementwise: see `preactivations`.)

    References: theory spec B.1.
    """
    if link == "he1":
        return (lambda h: h), (lambda h: torch.ones_like(h))
    if link == "he2":
        return (lambda h: (h * h - 1) / _SQRT2), (lambda h: 2 * h / _SQRT2)
    if link == "he3":
        return (lambda h: (h ** 3 - 3 * h) / _SQRT6), (lambda h: (3 * h * h - 3) / _SQRT6)
    raise ArgumentError(f"link must be one of 'he1', 'he2', 'he3' for an elementwise link, got {link!r} "
                        "(the softmax link is handled by population_loss / preactivations).")


def preactivations(X: torch.Tensor, S: torch.Tensor, *, centering: bool = False) -> torch.Tensor:
    """``H_ij = d^{-1/2} (x_i^T S x_j - c delta_ij Tr S)`` for tokens ``X [..., L, d]`` (``C = I``).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import preactivations
        >>> X = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64); S = torch.eye(2, dtype=torch.float64)
        >>> (preactivations(X, S) * 2 ** 0.5).round(decimals=12).tolist(), (preactivations(X, S, centering=True) * 2 ** 0.5).round(decimals=12).tolist()
        ([[1.0, 1.0], [1.0, 2.0]], [[-1.0, 1.0], [1.0, 0.0]])

    Arguments:
        X: tokens ``[..., L, d]``; S: ``[..., d, d]``; centering: subtract the diagonal mean ``Tr S``.

    Returns:
        ``[..., L, L]``. The scalar model of the spec uses ``H_12 = h``.

    References: theory spec B.1.
    """
    d = X.shape[-1]
    H = X @ S @ X.mT
    if centering:
        trace = S.diagonal(dim1=-2, dim2=-1).sum(-1)
        H = H - trace[..., None, None] * torch.eye(X.shape[-2], dtype=H.dtype, device=H.device)
    return H / math.sqrt(d)


# ---------------------------------------------------------------------------------------------------- order parameters
def order_parameters(S: torch.Tensor, S_star: torch.Tensor) -> dict:
    """Order parameters of a student ``S`` against the teacher ``S*`` (``tau = Tr / d``), batched.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import order_parameters
        >>> p = order_parameters(2 * torch.eye(4), torch.eye(4))
        >>> {k: round(float(v), 3) for k, v in p.items()}
        {'Q': 4.0, 'm': 2.0, 'rho': 1.0, 'Q_tilde': 4.0, 'm_tilde': 2.0, 'mu': 4.0, 'mu_star': 2.0, 'cos_c': nan}

    Returns:
        ``Q = tau(S S^T)``, ``m = tau(S S*^T)``, ``rho = tau(S* S*^T)``, ``Q_tilde = tau(S^2)``,
        ``m_tilde = tau(S S*)``, ``mu = d^{-1/2} Tr S``, ``mu_star``, and the centred cosine ``cos_c``
        (`centered_cosine`; NaN when either centred matrix is 0, as for multiples of the identity).

    References: theory spec B.1 (order parameters).
    """
    d = S.shape[-1]
    tr = lambda M: M.diagonal(dim1=-2, dim2=-1).sum(-1)  # noqa: E731
    return {
        "Q": (S * S).sum((-2, -1)) / d,
        "m": (S * S_star).sum((-2, -1)) / d,
        "rho": (S_star * S_star).sum((-2, -1)) / d,
        "Q_tilde": (S * S.mT).sum((-2, -1)) / d,
        "m_tilde": (S * S_star.mT).sum((-2, -1)) / d,
        "mu": tr(S) / math.sqrt(d),
        "mu_star": tr(S_star) / math.sqrt(d),
        "cos_c": centered_cosine(S, S_star),
    }


def centered_cosine(S: torch.Tensor, S_star: torch.Tensor) -> torch.Tensor:
    """``cos_c = tau(S~ S~*) / sqrt(tau(S~^2) tau(S~*^2))`` with ``S~ = S - (Tr S / d) I`` (trace part removed).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import centered_cosine
        >>> T = torch.diag(torch.tensor([1.0, 2.0, 3.0]))
        >>> round(float(centered_cosine(T + 5 * torch.eye(3), T)), 6)    # the trace part is ignored
        1.0

    The raw cosine ``m / sqrt(Q rho)`` is misleading: two independent Wishart matrices already have ~0.5 through
    their trace parts; the centred one is ~0 for unrelated matrices.

    Computed with Frobenius inner products, ``<S~, S~*>_F / (||S~||_F ||S~*||_F)``: for symmetric matrices this is
    the spec's formula, and for a non-symmetric (untied) student it stays in ``[-1, 1]``, whereas ``tau(S~^2)``
    can fall below ``||S~||_F^2 / d`` (or below 0) and push the literal formula past 1.

    References: theory spec B.1 (weak recovery).
    """
    def centre(M):
        d = M.shape[-1]
        mean = M.diagonal(dim1=-2, dim2=-1).mean(-1)
        return M - mean[..., None, None] * torch.eye(d, dtype=M.dtype, device=M.device)

    a, b = centre(S), centre(S_star)
    num = (a * b).sum((-2, -1))
    return num / ((a * a).sum((-2, -1)) * (b * b).sum((-2, -1))).sqrt()


def weak_recovery(S: torch.Tensor, S_star: torch.Tensor, link: str = "he2", threshold: float = 0.3) -> torch.Tensor:
    """Whether the student weakly recovers the teacher: ``cos_c >= threshold`` (``|cos_c|`` for even links).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import weak_recovery
        >>> T = torch.diag(torch.tensor([1.0, -1.0, 0.0]))
        >>> bool(weak_recovery(-T, T, "he2")), bool(weak_recovery(-T, T, "he1"))   # He2 cannot see the sign of S
        (True, False)

    Arguments:
        S, S_star: ``[..., d, d]``; link: the even link ``"he2"`` is invariant under ``S -> -S``, so the absolute
        value is used there; threshold: 0.3 as in the spec (the paper's value is unknown).

    Returns:
        boolean ``[...]``.

    References: theory spec B.1.
    """
    c = centered_cosine(S, S_star)
    if link == "he2":
        c = c.abs()
    return c >= threshold


# ---------------------------------------------------------------------------------------------------- losses
def population_loss(S: torch.Tensor, S_star: torch.Tensor, link: str = "he2", *, exact: bool = True,
                    samples: int = 100_000, seed: int = 0, centering: bool = False, tokens: int = 2) -> torch.Tensor:
    """Population loss ``Phi = E[(f(h(S)) - f(h(S*)))^2]`` over Gaussian tokens, batched over ``[..., d, d]``.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import population_loss
        >>> S, T = torch.eye(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)
        >>> float(population_loss(S, T, "he1")), round(float(population_loss(S, T, "he2")), 6)   # E h^4 / 2 = (3 + 2) / 2
        (1.0, 2.5)
        >>> round(float(population_loss(S, T, "he2", exact=False)), 6)                           # Gaussian limit
        1.5

    Arguments:
        S, S_star: student and teacher ``[..., d, d]``.
        link: ``"he1"`` (exact ``Q - 2m + rho``), ``"he2"`` (exact for any ``d``: the Gaussian part
            ``3/2 (Q^2 + rho^2) - Q rho - 2 m^2`` plus its ``d^{-2}`` trace correction), ``"he3"`` (Gaussian limit
            in ``Q, m, rho``), ``"softmax"`` (Monte Carlo: ``(1/L^2) ||softmax(H(S)) - softmax(H(S*))||_F^2`` with
            ``L = 2`` and row softmax).
        exact: ``False`` drops the He2 finite-``d`` correction (the Gaussian limit).
        samples, seed, centering, tokens: Monte-Carlo size, seed, diagonal centring and ``L`` (softmax only).

    Returns:
        ``[...]``.

    References: theory spec B.2 (derived and checked against 4e6-sample Monte Carlo at d = 12).
    """
    p = order_parameters(S, S_star)
    Q, m, rho = p["Q"], p["m"], p["rho"]
    if link == "he1":
        return Q - 2 * m + rho
    if link == "he2":
        phi = 1.5 * (Q * Q + rho * rho) - Q * rho - 2 * m * m
        if exact:
            phi = phi + _he2_correction(S, S_star)
        return phi
    if link == "he3":
        return ((15 * Q ** 3 - 18 * Q ** 2 + 9 * Q + 15 * rho ** 3 - 18 * rho ** 2 + 9 * rho) / 6
                - (9 * Q * rho * m + 6 * m ** 3 - 9 * rho * m - 9 * Q * m + 9 * m) / 3)
    if link == "softmax":
        return _softmax_loss_mc(S, S_star, samples, seed, centering, L=tokens)
    raise ArgumentError(f"link must be one of {LINKS}, got {link!r}.")


def _he2_correction(S, T):
    d = S.shape[-1]
    SS, TT = S @ S.mT, T @ T.mT
    tr = lambda M: M.diagonal(dim1=-2, dim2=-1).sum(-1)  # noqa: E731
    STt = S @ T.mT
    return (3 * tr(SS @ SS) + 3 * tr(TT @ TT) - 2 * tr(SS @ TT) - 2 * tr(STt @ STt)
            - 2 * tr(S.mT @ S @ T.mT @ T)) / d ** 2


def _softmax_loss_mc(S, T, samples, seed, centering, L=2):
    d = S.shape[-1]
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    X = torch.randn(samples, L, d, generator=g, dtype=S.dtype).to(S.device)
    batch = torch.broadcast_shapes(S.shape[:-2], T.shape[:-2])
    Sb, Tb = S.expand(*batch, d, d), T.expand(*batch, d, d)
    Sb, Tb = Sb.reshape(-1, 1, d, d), Tb.reshape(-1, 1, d, d)
    Y = torch.softmax(preactivations(X, Sb, centering=centering), -1)
    Ystar = torch.softmax(preactivations(X, Tb, centering=centering), -1)
    return ((Y - Ystar) ** 2).sum((-2, -1)).mean(-1).reshape(batch) / L ** 2


def _dphi(link, Q, m, rho):
    if link == "he1":
        return torch.ones_like(Q), -2 * torch.ones_like(m)
    if link == "he2":
        return 3 * Q - rho, -4 * m
    if link == "he3":
        return (7.5 * Q * Q - 6 * Q + 1.5 - 3 * rho * m + 3 * m,
                -3 * Q * rho - 6 * m * m + 3 * rho + 3 * Q - 3)
    raise ArgumentError(f"gradient flow needs link 'he1', 'he2' or 'he3', got {link!r} (softmax has no closed form).")


def population_gradient(S: torch.Tensor, S_star: torch.Tensor, link: str = "he2", *, exact: bool = True,
                        samples: int = 100_000, seed: int = 0, centering: bool = False, tokens: int = 2):
    """``G = d * grad_S Phi = 2 Phi_Q S + Phi_m S*`` (plus the He2 finite-``d`` part), batched.

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import population_gradient, population_loss
        >>> g = torch.Generator().manual_seed(0)
        >>> S, T = torch.randn(5, 5, generator=g, dtype=torch.float64), torch.randn(5, 5, generator=g, dtype=torch.float64)
        >>> S = S.requires_grad_(True); auto = torch.autograd.grad(population_loss(S, T, "he2"), S)[0] * 5
        >>> float((population_gradient(S.detach(), T, "he2") - auto).abs().max()) < 1e-12
        True

    Arguments:
        S, S_star: ``[..., d, d]``; link: ``"he1"``, ``"he2"``, ``"he3"`` (closed forms) or ``"softmax"``
        (``d`` times the autograd gradient of the Monte-Carlo `population_loss`; one fixed sample set, so it is a
        smooth function of ``S``); exact: include the He2 finite-d part
        ``d^{-1}[12 S S^T S - 4 T T^T S - 4 T S^T T - 4 S T^T T]``.
        samples, seed, centering, tokens: the softmax Monte Carlo (size, seed, diagonal centring, ``L``).

    Returns:
        ``[..., d, d]``: the mean drift of one online-SGD step of the direct student is ``-(eta / d^2) G``.

    References: theory spec B.2 (gradient table).
    """
    if link == "softmax":
        batch = torch.broadcast_shapes(S.shape[:-2], S_star.shape[:-2])
        d = S.shape[-1]
        with torch.enable_grad():
            leaf = S.detach().expand(*batch, d, d).clone().requires_grad_(True)
            loss = _softmax_loss_mc(leaf, S_star.detach(), samples, seed, centering, L=tokens)
            # Each batch element's loss depends on its own S only, so the gradient of the sum is per element.
            (grad,) = torch.autograd.grad(loss.sum(), leaf)
        return d * grad
    p = order_parameters(S, S_star)
    phi_q, phi_m = _dphi(link, p["Q"], p["m"], p["rho"])
    G = 2 * phi_q[..., None, None] * S + phi_m[..., None, None] * S_star
    if link == "he2" and exact:
        d = S.shape[-1]
        T = S_star
        G = G + (12 * S @ S.mT @ S - 4 * T @ T.mT @ S - 4 * T @ S.mT @ T - 4 * S @ T.mT @ T) / d
    return G


# ---------------------------------------------------------------------------------------------------- SGD
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
    if parameterization not in PARAMETERIZATIONS:
        raise ArgumentError(f"parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}.")
    if link not in LINKS:
        raise ArgumentError(f"link must be one of {LINKS}, got {link!r}.")
    softmax = link == "softmax"
    f, df = (None, None) if softmax else link_function(link)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 2:
        raise ArgumentError(f"tokens (L) must be an int >= 2, got {tokens!r}.")
    if tokens != 2 and not softmax:
        raise ArgumentError(f"tokens = {tokens} needs link='softmax': the elementwise links use the scalar "
                            "model h = H_12 of L = 2 tokens.")
    if clip is not None and not (isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0):
        raise ArgumentError(f"clip must be a positive number or None, got {clip!r}.")
    if not isinstance(S_star, torch.Tensor) or S_star.dim() < 2 or S_star.shape[-1] != S_star.shape[-2]:
        raise ArgumentError("S_star must be a square teacher matrix tensor [d, d] (or [runs, d, d]).")
    for name, value in (("steps", steps), ("record_every", record_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"{name} must be a positive int, got {value!r}.")
    dtype, device = S_star.dtype, S_star.device
    d = S_star.shape[-1]
    r = d if rank is None else int(rank)
    kappa = 1.0 / math.sqrt(r * d)
    if runs is None:
        batch = tuple(S_star.shape[:-2])
    else:
        batch = (int(runs),)
    T = S_star.expand(*batch, d, d)
    if lr is None:
        lr = eta / d if parameterization == "direct" else eta * math.sqrt(r / d)
    else:
        eta = lr * d if parameterization == "direct" else lr / math.sqrt(r / d)
    g = torch.Generator(device="cpu").manual_seed(int(seed))

    def randn(*shape):
        # Seeded draws on the CPU so a seed means the same run on every device.
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    if parameterization == "direct":
        if S0 is None:
            G0 = randn(*batch, d, d)
            S0 = init_scale * (G0 + G0.mT) / math.sqrt(2 * d)
        params = [S0.to(dtype=dtype, device=device).expand(*batch, d, d).clone()]
    elif params0 is not None:
        given = [params0] if isinstance(params0, torch.Tensor) else list(params0)
        wanted = 1 if parameterization == "tied" else 2
        if len(given) != wanted or not all(isinstance(p, torch.Tensor) and p.shape[-2:] == (d, r) for p in given):
            what = "a tensor W0 [d, r]" if wanted == 1 else "a pair (U0, V0) of [d, r] tensors"
            raise ArgumentError(f"params0 for the {parameterization} parameterization must be {what} with d = {d}, "
                                f"r = {r}; got {_describe(params0)}.")
        params = [p.to(dtype=dtype, device=device).expand(*batch, d, r).clone() for p in given]
    elif parameterization == "tied":
        params = [init_scale * randn(*batch, d, r)]
    else:
        params = [init_scale * randn(*batch, d, r), init_scale * randn(*batch, d, r)]
    if S0 is not None and parameterization != "direct":
        raise ArgumentError(f"S0 sets the direct student only; pass params0 for the {parameterization} one.")

    def current_S():
        if parameterization == "direct":
            return params[0]
        if parameterization == "tied":
            return kappa * params[0] @ params[0].mT
        return kappa * params[0] @ params[1].mT

    def clipped(grad):
        if clip is None:
            return grad
        norm = grad.norm(dim=(-2, -1), keepdim=True)
        return grad * torch.clamp(clip / norm.clamp_min(1e-300), max=1.0)

    records = {k: [] for k in ("Q", "m", "rho", "Q_tilde", "m_tilde", "mu", "mu_star", "cos_c")}
    record_steps = []

    def record(step):
        for k, v in order_parameters(current_S(), T).items():
            records[k].append(v)
        record_steps.append(step)

    record(0)
    scale = 1.0 / math.sqrt(d)
    decay = 1.0 - lr * weight_decay
    eye_L = torch.eye(tokens, dtype=dtype, device=device)
    eye_d = torch.eye(d, dtype=dtype, device=device) if centering and parameterization == "direct" else None

    def softmax_backward(X, trace_S, raw_H):
        """``dl/dH`` of the softmax loss, one sample per run; ``raw_H`` is the student's ``X S X^T``."""
        Y_star = torch.softmax(preactivations(X, T, centering=centering), -1)
        if centering:
            raw_H = raw_H - trace_S[..., None, None] * eye_L
        Y = torch.softmax(scale * raw_H, -1)
        E = 2 * (Y - Y_star) / tokens ** 2
        return Y * (E - (E * Y).sum(-1, keepdim=True))

    def trace_of(G):
        return G.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None]

    def softmax_step(params):
        X = randn(*batch, tokens, d)
        if parameterization == "direct":
            S = params[0]
            G = softmax_backward(X, S.diagonal(dim1=-2, dim2=-1).sum(-1), X @ S @ X.mT)
            grad = scale * (X.mT @ G @ X)
            if centering:
                grad = grad - scale * trace_of(G) * eye_d
            return [decay * S - lr * clipped(grad)]
        if parameterization == "tied":
            W = params[0]
            A = X @ W
            G = softmax_backward(X, kappa * (W * W).sum((-2, -1)), kappa * A @ A.mT)
            grad = scale * kappa * (X.mT @ ((G + G.mT) @ A))
            if centering:
                grad = grad - 2 * scale * kappa * trace_of(G) * W
            return [decay * W - lr * clipped(grad)]
        U, Vm = params
        A, B = X @ U, X @ Vm
        G = softmax_backward(X, kappa * (U * Vm).sum((-2, -1)), kappa * A @ B.mT)
        grad_u = scale * kappa * (X.mT @ (G @ B))
        grad_v = scale * kappa * (X.mT @ (G.mT @ A))
        if centering:
            grad_u = grad_u - scale * kappa * trace_of(G) * Vm
            grad_v = grad_v - scale * kappa * trace_of(G) * U
        return [decay * U - lr * clipped(grad_u), decay * Vm - lr * clipped(grad_v)]

    def hermite_step(params):
        x1, x2 = randn(*batch, d), randn(*batch, d)
        y = f(scale * (x1 * (T @ x2.unsqueeze(-1))[..., 0]).sum(-1))
        if parameterization == "direct":
            S = params[0]
            h = scale * (x1 * (S @ x2.unsqueeze(-1))[..., 0]).sum(-1)
            c = 2 * (f(h) - y) * df(h) * scale
            grad = c[..., None, None] * x1.unsqueeze(-1) * x2.unsqueeze(-2)
            return [decay * S - lr * clipped(grad)]
        if parameterization == "tied":
            W = params[0]
            a1, a2 = (x1.unsqueeze(-2) @ W)[..., 0, :], (x2.unsqueeze(-2) @ W)[..., 0, :]
            h = scale * kappa * (a1 * a2).sum(-1)
            c = (2 * (f(h) - y) * df(h) * scale * kappa)[..., None, None]
            grad = c * (x1.unsqueeze(-1) * a2.unsqueeze(-2) + x2.unsqueeze(-1) * a1.unsqueeze(-2))
            return [decay * W - lr * clipped(grad)]
        U, Vm = params
        b1, b2 = (x1.unsqueeze(-2) @ U)[..., 0, :], (x2.unsqueeze(-2) @ Vm)[..., 0, :]
        h = scale * kappa * (b1 * b2).sum(-1)
        c = (2 * (f(h) - y) * df(h) * scale * kappa)[..., None, None]
        grad_u = c * x1.unsqueeze(-1) * b2.unsqueeze(-2)
        grad_v = c * x2.unsqueeze(-1) * b1.unsqueeze(-2)
        return [decay * U - lr * clipped(grad_u), decay * Vm - lr * clipped(grad_v)]

    step_fn = softmax_step if softmax else hermite_step
    for step in range(1, steps + 1):
        params = step_fn(params)
        if step % record_every == 0:
            record(step)
    order = {k: torch.stack(v) for k, v in records.items()}
    step_tensor = torch.tensor(record_steps, dtype=dtype, device=device)
    times = step_tensor * eta / d ** 2
    cos = order["cos_c"].abs() if link == "he2" else order["cos_c"]
    hit = torch.nan_to_num(cos, nan=0.0) >= recovery_threshold
    first = torch.where(hit.any(0), hit.to(torch.int8).argmax(0), torch.full(hit.shape[1:], -1, device=device))
    escape = torch.where(first >= 0, times[first.clamp_min(0)], torch.full_like(times[0].expand(first.shape), math.inf))
    out_params = params[0] if len(params) == 1 else tuple(params)
    return AIMRun(times, step_tensor, order, current_S(), out_params, escape)


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return type(value).__name__


def make_teacher(d: int, kind: str = "goe", *, rank_ratio: float = 0.5, seed: int = 0,
                 dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """A teacher ``S*`` normalized to ``rho = tau(S* S*^T) = 1``: a GOE matrix, or a PSD Wishart one.

    Example::

        >>> from jacobiscope.theory.aim import make_teacher, order_parameters
        >>> T = make_teacher(50, "psd", seed=1)
        >>> round(float(order_parameters(T, T)["rho"]), 12), bool((T - T.T).abs().max() == 0)
        (1.0, True)

    Arguments:
        d: dimension; kind: ``"goe"`` (``(G + G^T)/sqrt(2 d)``: indefinite, trace ~ 0, the spec's B.4 teacher) or
        ``"psd"`` (``W W^T`` with ``W [d, rank_ratio d]``: Marchenko–Pastur spectrum, ``Tr S* = O(d)``; the spec's
        choice for tied students under odd links); seed, dtype, device: of the draw (made on the CPU).

    References: theory spec B.1, B.3 (truncation setup), B.4.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise ArgumentError(f"d must be an int >= 2, got {d!r}.")
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    if kind == "goe":
        G = torch.randn(d, d, generator=g, dtype=dtype)
        T = G + G.T
    elif kind == "psd":
        if not 0 < rank_ratio <= 1:
            raise ArgumentError(f"rank_ratio = r*/d must be in (0, 1], got {rank_ratio!r}.")
        W = torch.randn(d, max(int(round(rank_ratio * d)), 1), generator=g, dtype=dtype)
        T = W @ W.T
    else:
        raise ArgumentError(f"kind must be 'goe' or 'psd', got {kind!r}.")
    T = T / ((T * T).sum() / d).sqrt()
    return T.to(device) if device is not None else T


def escape_runs(S_star: torch.Tensor | None = None, *, d: int = 16, link: str = "he2", t: float = 2.0,
                eta: float = 0.01, runs: int = 2, init_scale: float = 0.5, clip: float | None = None,
                centering: bool = False, seed: int = 0, records: int = 200, random_direct: bool = True) -> dict:
    """Online SGD of every parameterization from an uninformative start: the data of the escape curves.

    Example::

        >>> from jacobiscope.theory.aim import escape_runs
        >>> out = escape_runs(d=8, t=0.2, runs=1, records=4)
        >>> list(out), bool((out["direct, S0 = 0"].S == 0).all())     # He2: S = 0 never moves
        (['direct, S0 = 0', 'direct, random S0', 'tied', 'untied'], True)

    Arguments:
        S_star: teacher ``[d, d]`` (default ``make_teacher(d, "goe", seed=seed)``, the spec's B.4 setting).
        d: dimension when ``S_star`` is not given; link: as `online_sgd`.
        t: gradient-flow horizon (``steps = t d^2 / eta``); eta, clip, centering, seed: as `online_sgd`. Small
            ``d`` needs a smaller ``eta`` than the spec's 0.05 at d = 100 (the default 0.01 keeps He1/He2/softmax
            stable at d = 16 without clipping; He3 can still diverge, and clipping biases its drift, see
            `online_sgd`).
        runs: independent runs per parameterization; init_scale: ``sigma_0`` of the random starts.
        records: about this many recorded times.
        random_direct: also run the direct student from a random GOE ``S0`` of scale ``sigma_0`` (spec B.4: He2 is
            stuck only at the exact critical point ``S0 = 0``).

    Returns:
        ``{label: AIMRun}`` with labels ``"direct, S0 = 0"``, ``"direct, random S0"`` (if asked), ``"tied"``,
        ``"untied"``; each run's ``escape_time`` is the first time with weak recovery (``inf`` if never).

    References: theory spec B.4 (claims versus this model), B.5.
    """
    if S_star is None:
        S_star = make_teacher(d, "goe", seed=seed)
    d = S_star.shape[-1]
    steps = max(int(round(t * d * d / eta)), 1)
    every = max(steps // max(int(records), 1), 1)
    common = dict(link=link, steps=steps, eta=eta, runs=runs, clip=clip, centering=centering,
                  record_every=every, init_scale=init_scale)
    out = {"direct, S0 = 0": online_sgd(S_star, parameterization="direct", seed=seed + 1,
                                        S0=torch.zeros_like(S_star), **common)}
    if random_direct:
        out["direct, random S0"] = online_sgd(S_star, parameterization="direct", seed=seed + 2, **common)
    out["tied"] = online_sgd(S_star, parameterization="tied", seed=seed + 3, **common)
    out["untied"] = online_sgd(S_star, parameterization="untied", seed=seed + 4, **common)
    return out


# ---------------------------------------------------------------------------------------------------- gradient flow
def gradient_flow(S_star: torch.Tensor, S0: torch.Tensor, *, link: str = "he2", parameterization: str = "tied",
                  t: float = 1.0, dt: float = 0.01, exact: bool = True, A0: torch.Tensor | None = None,
                  B0: torch.Tensor | None = None, record_every: int = 1):
    """RK4 integration of the matrix gradient-flow ODE closed in ``S`` (the ``eta -> 0`` limit of `online_sgd`).

    Example::

        >>> import torch
        >>> from jacobiscope.theory.aim import gradient_flow
        >>> I3 = torch.eye(3, dtype=torch.float64)
        >>> times, S = gradient_flow(I3, 0.1 * I3, link="he1", t=20.0, dt=0.05)
        >>> round(float((S[-1] - torch.eye(3)).abs().max()), 6)          # tied He1 learns a PSD teacher
        0.0

    Arguments:
        S_star: teacher ``[..., d, d]``; S0: initial student ``S`` (tied: ``kappa W0 W0^T``; untied:
        ``kappa U0 V0^T`` with ``A0 = kappa U0 U0^T`` and ``B0 = kappa V0 V0^T`` required).
        link: ``"he1"``, ``"he2"``, ``"he3"``; exact: the He2 finite-``d`` part of ``G``.
        parameterization: ``"direct"``: ``S' = -G``; ``"tied"``: ``S' = -2 (G S + S G)``; ``"untied"``:
            ``S' = -(G B + A G)``, ``A' = -(G S^T + S G^T)``, ``B' = -(G^T S + S^T G)``.
        t, dt, record_every: horizon, RK4 step and recording stride (time is ``samples * eta / d^2``).

    Returns:
        ``(times [K], S [K, ..., d, d])``.

    References: theory spec B.3 (cost O(d^3) per step; the reference for truncated hierarchies).
    """
    if parameterization not in PARAMETERIZATIONS:
        raise ArgumentError(f"parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}.")
    if link not in ("he1", "he2", "he3"):
        raise ArgumentError(f"gradient_flow needs a closed-form link 'he1', 'he2' or 'he3', got {link!r}; for the "
                            "softmax link use online_sgd, or population_gradient(S, S_star, 'softmax') for the drift.")
    if parameterization == "untied" and (A0 is None or B0 is None):
        raise ArgumentError("the untied flow needs A0 = kappa U0 U0^T and B0 = kappa V0 V0^T as well as S0.")
    T = S_star

    def rhs(state):
        S = state[0]
        G = population_gradient(S, T, link, exact=exact)
        if parameterization == "direct":
            return (-G,)
        if parameterization == "tied":
            return (-2 * (G @ S + S @ G),)
        A, B = state[1], state[2]
        return (-(G @ B + A @ G), -(G @ S.mT + S @ G.mT), -(G.mT @ S + S.mT @ G))

    state = (S0,) if parameterization != "untied" else (S0, A0, B0)
    steps = max(int(round(t / dt)), 1)
    frames = [S0]
    for step in range(1, steps + 1):
        k1 = rhs(state)
        k2 = rhs(tuple(s + 0.5 * dt * k for s, k in zip(state, k1)))
        k3 = rhs(tuple(s + 0.5 * dt * k for s, k in zip(state, k2)))
        k4 = rhs(tuple(s + dt * k for s, k in zip(state, k3)))
        state = tuple(s + (dt / 6) * (a + 2 * b + 2 * c + e) for s, a, b, c, e in zip(state, k1, k2, k3, k4))
        if step % record_every == 0:
            frames.append(state[0])
    times = torch.arange(len(frames), dtype=S0.dtype, device=S0.device) * dt * record_every
    return times, torch.stack(frames)


# ---------------------------------------------------------------------------------------------------- moment hierarchy
def marchenko_pastur_spectrum(ratio: float = 0.5, points: int = 400, dtype=torch.float64):
    """A quadrature ``(sigma, weights)`` of the teacher spectrum ``kappa* W* W*^T``, ``W*`` of rank ``r* = ratio d``.

    Example::

        >>> from jacobiscope.theory.aim import marchenko_pastur_spectrum
        >>> sigma, w = marchenko_pastur_spectrum(0.5)
        >>> round(float(w.sum()), 12), round(float((w * sigma ** 2).sum()), 12), round(float(w[0]), 3)
        (1.0, 1.0, 0.5)

    Mass ``1 - ratio`` at 0 plus the Marchenko–Pastur density of ratio ``ratio`` (Gauss–Chebyshev nodes of the
    second kind, exact for the square-root edges), rescaled so that ``rho = int sigma^2 dmu* = 1``.

    References: theory spec B.3 (truncation setup).
    """
    if not 0 < ratio <= 1:
        raise ArgumentError(f"ratio = r*/d must be in (0, 1], got {ratio!r}.")
    lo, hi = (1 - math.sqrt(ratio)) ** 2, (1 + math.sqrt(ratio)) ** 2
    k = torch.arange(1, points + 1, dtype=dtype)
    u = torch.cos(k * math.pi / (points + 1))
    # Gauss–Chebyshev (2nd kind): int sqrt(1-u^2) g(u) du ~ sum w_k g(u_k); the MP density is sqrt(..)/(2 pi ratio x).
    wk = math.pi / (points + 1) * torch.sin(k * math.pi / (points + 1)) ** 2
    x = (lo + hi) / 2 + (hi - lo) / 2 * u
    half = (hi - lo) / 2
    dens_w = wk * half * half / (2 * math.pi * ratio * x)
    dens_w = dens_w / dens_w.sum()  # remove the quadrature's tiny mass error
    sigma = torch.cat([torch.zeros(1, dtype=dtype), x]) if ratio < 1 else x
    weights = torch.cat([torch.tensor([1 - ratio], dtype=dtype), ratio * dens_w]) if ratio < 1 else dens_w
    scale = torch.sqrt((weights * sigma ** 2).sum())
    return sigma / scale, weights


def _orthonormal_polynomials(sigma, weights, M):
    """Values ``P_k(sigma_j)`` ``[M, J]`` of the first ``M`` orthonormal polynomials of the discrete measure
    (Stieltjes three-term recurrence: stable, unlike QR of a Vandermonde matrix)."""
    P = [torch.ones_like(sigma) / weights.sum().sqrt()]
    prev = torch.zeros_like(sigma)
    beta = 0.0
    for _ in range(1, M):
        p = P[-1]
        alpha = (weights * sigma * p * p).sum()
        q = (sigma - alpha) * p - beta * prev
        # Re-orthogonalize once: cheap insurance against round-off in the recurrence.
        for r in P:
            q = q - (weights * q * r).sum() * r
        beta = (weights * q * q).sum().sqrt()
        prev = p
        P.append(q / beta)
    return torch.stack(P)


def spectral_closure(sigma: torch.Tensor, weights: torch.Tensor, s0, *, link: str = "he2", t: float = 6.0,
                     dt: float = 0.01, order: int | None = None, d: int | None = None):
    """Tied gradient flow for a student commuting with the teacher: ``s(sigma, t)`` per teacher eigenvalue, or its
    Galerkin truncation onto the first ``order`` orthonormal polynomials of the teacher's spectral law.

    Example::

        >>> from jacobiscope.theory.aim import marchenko_pastur_spectrum, spectral_closure
        >>> sigma, w = marchenko_pastur_spectrum(0.5, points=60)
        >>> times, loss = spectral_closure(sigma, w, 0.05, t=6.0, dt=0.02)
        >>> round(float(loss[0]), 4), float(loss[-1]) < 0.05 * float(loss[0])      # Phi2 ~ 3/2 rho^2 at S0 ~ 0
        (1.4958, True)

    Arguments:
        sigma, weights: the teacher's spectral law ``mu*`` (atoms and weights, e.g. `marchenko_pastur_spectrum`).
        s0: the student's initial eigenvalue(s) (``S0 = s0 I``: a scalar, or ``[J]`` per atom).
        link: ``"he1"``, ``"he2"``, ``"he3"``.
        t, dt: horizon and RK4 step.
        order: ``M``, the truncation order: ``s(sigma, t) ~ sum_{k<M} c_k(t) P_k(sigma)`` with Galerkin projection
            of the right-hand side; ``None`` solves the closure exactly (one ODE per atom).
        d: include the He2 finite-``d`` term ``(1/d)(12 s^3 - 12 s sigma^2)`` of the gradient (matches SGD at
            finite ``d``); ``None`` is the ``d -> infinity`` (Gaussian) limit.

    Returns:
        ``(times [K], loss [K])`` with the population loss evaluated from ``Q = int s^2 dmu*``,
        ``m = int s sigma dmu*``, ``rho = int sigma^2 dmu*`` (Gaussian-limit formula).

    Dynamics: ``ds/dt = -4 s g(s, sigma)``, ``g = 2 Phi_Q s + Phi_m sigma`` (He2: ``-8 (3Q - rho) s^2 + 16 m sigma s``).

    References: theory spec B.3 (moment hierarchy, spectral closure, truncation order M).
    """
    s = torch.as_tensor(s0, dtype=sigma.dtype, device=sigma.device) * torch.ones_like(sigma)
    rho = (weights * sigma * sigma).sum()

    def loss_of(s_vals):
        Q = (weights * s_vals * s_vals).sum(-1)
        m = (weights * s_vals * sigma).sum(-1)
        return population_loss_from(link, Q, m, rho)

    def field(s_vals):
        Q = (weights * s_vals * s_vals).sum()
        m = (weights * s_vals * sigma).sum()
        phi_q, phi_m = _dphi(link, Q, m, rho)
        g = 2 * phi_q * s_vals + phi_m * sigma
        if d is not None and link == "he2":
            g = g + (12 * s_vals ** 3 - 12 * s_vals * sigma ** 2) / d
        return -4 * s_vals * g

    if order is None:
        state, rhs, values = s, field, (lambda z: z)
    else:
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ArgumentError(f"order (M) must be a positive int or None, got {order!r}.")
        P = _orthonormal_polynomials(sigma, weights, order)  # [M, J]
        state = (P * weights * s).sum(-1)

        def values(c):
            return c @ P

        def rhs(c):
            return (P * weights * field(values(c))).sum(-1)

    steps = max(int(round(t / dt)), 1)
    losses = [loss_of(values(state))]
    for _ in range(steps):
        k1 = rhs(state)
        k2 = rhs(state + 0.5 * dt * k1)
        k3 = rhs(state + 0.5 * dt * k2)
        k4 = rhs(state + dt * k3)
        state = state + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        losses.append(loss_of(values(state)))
    times = torch.arange(steps + 1, dtype=sigma.dtype, device=sigma.device) * dt
    return times, torch.stack(losses)


def population_loss_from(link: str, Q, m, rho):
    """Gaussian-limit population loss from the order parameters ``(Q, m, rho)`` (He1 is exact).

    Example::

        >>> from jacobiscope.theory.aim import population_loss_from
        >>> population_loss_from("he2", 1.0, 0.5, 1.0), population_loss_from("he3", 1.0, 0.5, 1.0)
        (1.5, 1.75)

    References: theory spec B.2.
    """
    if link == "he1":
        return Q - 2 * m + rho
    if link == "he2":
        return 1.5 * (Q * Q + rho * rho) - Q * rho - 2 * m * m
    if link == "he3":
        return ((15 * Q ** 3 - 18 * Q ** 2 + 9 * Q + 15 * rho ** 3 - 18 * rho ** 2 + 9 * rho) / 6
                - (9 * Q * rho * m + 6 * m ** 3 - 9 * rho * m - 9 * Q * m + 9 * m) / 3)
    raise ArgumentError(f"link must be 'he1', 'he2' or 'he3', got {link!r}.")


def truncation_errors(orders=(1, 2, 3, 4, 5, 6), *, ratio: float = 0.5, s0: float = 0.05, link: str = "he2",
                      t: float = 6.0, dt: float = 0.01, points: int = 200) -> dict:
    """Relative L2-in-time error of the loss curve of the order-``M`` Galerkin truncation against the exact closure.

    Example::

        >>> from jacobiscope.theory.aim import truncation_errors
        >>> errs = truncation_errors((1, 3), points=40, dt=0.02)
        >>> errs[3] < 0.1 * errs[1]
        True

    Arguments:
        orders: the truncation orders ``M``; ratio, s0, link, t, dt: the setup (spec: Marchenko–Pastur teacher with
        ``r*/d = 1/2`` and ``rho = 1``, ``S0 = 0.05 I``, He2, ``t in [0, 6]``); points: quadrature nodes.

    Returns:
        ``{M: error}`` with ``error = ||loss_M - loss||_2 / ||loss||_2`` over the time grid.

    References: theory spec B.3 (truncation table: 1.2, 4.5e-2, 8.6e-3, 1.5e-3, 2.7e-4, 6.3e-5 for M = 1..6).
    """
    sigma, weights = marchenko_pastur_spectrum(ratio, points)
    _, reference = spectral_closure(sigma, weights, s0, link=link, t=t, dt=dt)
    out = {}
    for M in orders:
        _, loss = spectral_closure(sigma, weights, s0, link=link, t=t, dt=dt, order=M)
        out[M] = float((loss - reference).norm() / reference.norm())
    return out
