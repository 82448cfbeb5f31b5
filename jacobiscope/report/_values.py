"""Moved to `jacobiscope._values` (the base layer, so diagnostics can use it without importing the report)."""
from .._values import (  # noqa: F401 - the old import path keeps working
    _finite_or_nan, _is_number, _last, _nulls_to_nan, _plain, _plain_or_raw, _plural, _same,
)
