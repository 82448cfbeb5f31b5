"""Population losses of the attention-indexed model and their gradients (spec B.2)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from ._aim_checks import count, square
from ._aim_model import LINKS, order_parameters, preactivations


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
    square(S_star, "S_star")
    square(S, "S", S_star.shape[-1])
    if link == "softmax":
        count(samples, "samples", "100000")  # 0 samples averaged to a loss of 0
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
