"""Progress on stderr for anything that may take more than a few seconds, in a terminal or a notebook.

Example::

    >>> from jacobiscope._progress import progress_bar
    >>> with progress_bar(3, "demo", unit="row", enabled=False) as bar:
    ...     for _ in range(3):
    ...         bar.update(1)
    >>> bar.n
    3
"""
from __future__ import annotations

import logging
import sys

__all__ = ["progress_bar"]

logger = logging.getLogger(__name__)

#: Seconds before a bar appears: quick calls print nothing at all.
DELAY_SECONDS = 2.0


class _SilentBar:
    """Counts like a bar, prints nothing (``enabled=False``)."""

    def __init__(self, total: int):
        self.total, self.n = total, 0

    def update(self, count: int = 1) -> None:
        self.n += count

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(total: int, desc: str, *, unit: str, enabled: bool | None = None, delay: float | None = None):
    """A progress bar over ``total`` units of work, shown once the work has taken ``delay`` seconds.

    Arguments:
        total: how many units the work has (rows, puzzles, batches).
        desc: what is being done, shown before the bar.
        unit: the name of one unit ("row" for one (input, layer) of `analyze`).
        enabled: ``False`` for silence; ``None`` or ``True`` shows it (on stderr in a terminal or a log, as a
            widget in Jupyter when ipywidgets is installed, else as text).
        delay: seconds before the bar first appears (default `DELAY_SECONDS`).

    Returns:
        An object with ``update(n)``, ``close()`` and ``n`` that is also a context manager.
    """
    if enabled is False:
        return _SilentBar(total)
    delay = DELAY_SECONDS if delay is None else delay
    try:
        from tqdm.auto import tqdm as auto_tqdm

        return auto_tqdm(total=total, desc=desc, unit=unit, delay=delay, file=sys.stderr)
    except ImportError:
        # Jupyter without ipywidgets: tqdm.auto's widget cannot start, the text bar still can.
        logger.debug("tqdm.auto unavailable (no ipywidgets?): a text progress bar for %r", desc)
        try:
            from tqdm.std import tqdm as text_tqdm
        except ImportError:  # pragma: no cover - tqdm comes with huggingface_hub
            return _SilentBar(total)
        return text_tqdm(total=total, desc=desc, unit=unit, delay=delay, file=sys.stderr)
