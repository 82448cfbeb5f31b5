"""The built-in diagnostics, registered in the order they run (the regime verdict last: it reads the others).

They register on the registry's first use, before any user registration can land, so a user's diagnostic named
like a built-in is refused (not silently overwritten when the built-ins load later).
"""
from ._base import _register_builtin
from ._attractors import Attractors
from ._clusters import Clusters
from ._depth_safety import DepthSafety
from ._eigenvalues import Eigenvalues
from ._energy import Energy
from ._fixed_points import FixedPoints
from ._halting import Halting
from ._loop_depth import LoopDepth
from ._loop_lens import LoopLensDiagnostic
from ._lyapunov import Lyapunov
from ._regime import Regime
from ._spectral_norm import SpectralNorm

BUILTIN = (SpectralNorm(), Eigenvalues(), Lyapunov(), Clusters(), Energy(), FixedPoints(), Attractors(), Halting(),
           LoopDepth(), LoopLensDiagnostic(), DepthSafety(), Regime())
BUILTIN_NAMES = tuple(d.name for d in BUILTIN)

for _diagnostic in BUILTIN:
    _register_builtin(_diagnostic)
