"""The report's schema: its format name and version, the vocabularies, and the row (`LayerResult`, defined with the
diagnostics that fill it; re-exported here, where it has always been imported from)."""
from __future__ import annotations

from ..diagnostics._clusters import CLUSTER_KEYS
from ..diagnostics._eigenvalues import OSCILLATION_KEYS
from ..diagnostics._lyapunov import LYAPUNOV_KEYS
from ..diagnostics._row import MODES, ROW_COLUMNS, TAIL_COLUMNS, LayerResult
from ..dynamics.regime import Regime

__all__ = ["LayerResult", "MODES", "REGIMES", "FORMAT", "FORMAT_VERSION", "OSCILLATION_KEYS", "LYAPUNOV_KEYS",
           "CLUSTER_KEYS", "DATAFRAME_COLUMNS"]

# Every verdict a row may carry: the classifier's and "unknown" (one vocabulary, `jacobiscope.dynamics.Regime`).
REGIMES = tuple(regime.value for regime in Regime)

FORMAT = "jacobiscope-report"

#: 2: every diagnostic's result in ``row["results"][name]``, every non-finite float in ``"nonfinite"``.
#: 1: the six original diagnostics as row fields, the others in ``extra``; read through `upgrade`.
FORMAT_VERSION = 2

#: The DataFrame columns every report has (the six listed built-ins' scalars between the row's own columns);
#: other diagnostics add ``<name>.<scalar>`` columns before ``solved``.
DATAFRAME_COLUMNS = (
    *ROW_COLUMNS,
    "max_spectral_norm", "max_spectral_norm_loop", "final_spectral_norm",
    "eigen_loop", *OSCILLATION_KEYS,
    "lambda_max", "lambda_max_stderr", "kaplan_yorke",
    "final_top_eigenvalue", "final_effective_clusters", "final_cluster_count",
    "final_energy",
    "regime", "lambda_max_late", "lambda_max_late_half_width", "judged_on",
    *TAIL_COLUMNS,
)
