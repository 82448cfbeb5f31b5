"""Matrix-free linear algebra on a looped map's Jacobian: products, dense Jacobian, spectral norm, eigenvalues."""
from .dense import DEFAULT_MAX_BYTES, jacobian
from .eig import EigenResult, jacobian_eigenvalues
from .operators import JacobianOperator, forward_ad_context, jacobian_matmat, jvp, vjp
from .svd import SpectralNormResult, spectral_norm

__all__ = [
    "DEFAULT_MAX_BYTES",
    "EigenResult",
    "JacobianOperator",
    "SpectralNormResult",
    "forward_ad_context",
    "jacobian",
    "jacobian_eigenvalues",
    "jacobian_matmat",
    "jvp",
    "spectral_norm",
    "vjp",
]
