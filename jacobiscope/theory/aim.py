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

from ._aim_escape import escape_runs, make_teacher
from ._aim_flow import gradient_flow
from ._aim_hierarchy import marchenko_pastur_spectrum, spectral_closure, truncation_errors
from ._aim_losses import population_gradient, population_loss, population_loss_from
from ._aim_model import (
    LINKS,
    PARAMETERIZATIONS,
    centered_cosine,
    link_function,
    order_parameters,
    preactivations,
    weak_recovery,
)
from ._aim_sgd import AIMRun, online_sgd

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
