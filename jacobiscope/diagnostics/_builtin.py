"""The built-in diagnostics, registered in the order they run (the regime verdict last: it reads the others)."""
from ._base import register_diagnostic
from ._clusters import Clusters
from ._eigenvalues import Eigenvalues
from ._energy import Energy
from ._fixed_points import FixedPoints
from ._halting import Halting
from ._loop_depth import LoopDepth
from ._lyapunov import Lyapunov
from ._regime import Regime
from ._spectral_norm import SpectralNorm

BUILTIN = (SpectralNorm(), Eigenvalues(), Lyapunov(), Clusters(), Energy(), FixedPoints(), Halting(), LoopDepth(), Regime())
BUILTIN_NAMES = tuple(d.name for d in BUILTIN)

for _diagnostic in BUILTIN:
    register_diagnostic(_diagnostic, replace=True)
