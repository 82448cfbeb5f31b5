"""The attention-indexed model itself: links, pre-activations, order parameters and weak recovery (spec B.1)."""
from __future__ import annotations

import math

import torch

from ..errors import ArgumentError
from ._aim_checks import finite, square

LINKS = ("he1", "he2", "he3", "softmax")
PARAMETERIZATIONS = ("direct", "tied", "untied")
_SQRT2, _SQRT6 = math.sqrt(2.0), math.sqrt(6.0)


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
    square(S_star, "S_star")
    square(S, "S", S_star.shape[-1])
    finite(threshold, "threshold", low=0, high=1, example="0.3")
    c = centered_cosine(S, S_star)
    if link == "he2":
        c = c.abs()
    return c >= threshold
