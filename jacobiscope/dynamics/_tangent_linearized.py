"""The loop of a Lyapunov run on the Krylov products' recording: the forward's part once per loop, then ``J v`` for
each frame vector from the part linear in it.

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.dynamics._tangent_linearized import linearized_tangent_step
    >>> m = jacobiscope.systems.henon_map()
    >>> step = linearized_tangent_step(m, m.x0, batch=1, owner=m._function)
    >>> x, tangent = step(m.x0, torch.tensor([[1.0, 0.0]], dtype=torch.float64), renormalize=False)
    >>> [round(v, 12) for v in tangent[0].tolist()]      # J e_1 at (0.1, 0.1): (-2 a x, b)
    [-0.28, 0.3]

Why a second way to replay a recording beside `_tangent_trace`: one recording (`jacobiscope.linalg._linearized`,
~0.2-0.6 s on CPU) then serves the spectral norm, the eigenvalues and the Lyapunov loop of an ``analyze`` call,
where each used to record its own; and a loop over the frame's vectors runs closer to the forward's efficiency than
the ``vmap`` of a traced jvp when the map is arithmetic-bound (256 x 512 attention, k = 16: 23.9 forwards a loop
against 32.8, CPU, one thread). The ``vmap`` graph wins when the map is dispatch-bound and k > 1 (HRM-Text, k = 4:
3.9 against 6.3): `LoopRunner` measures both and keeps the faster.
"""
from __future__ import annotations

import torch

from ..linalg._linearized import graph_leaves, split_graph
from ._tangent_step import TangentStep, orthonormalize_frame

__all__ = ["linearized_tangent_step"]


def linearized_tangent_step(looped_map, x, *, batch: int, owner, graph=None) -> TangentStep:
    """A `TangentStep` on the split graph (recorded now if nobody has); raises RuntimeError at its first call when
    the map cannot be recorded (the caller's trial drops the path)."""
    if graph is None:
        graph = split_graph(looped_map, x, owner, record=True)

    def advance(state, frame):
        if graph is None:
            raise RuntimeError(f"'{looped_map.name}' could not be recorded")
        constant, linear = graph
        saved = constant(*graph_leaves(looped_map, state))
        output, tangents = None, []
        for vector in frame:
            output, product = linear(*saved, vector)
            tangents.append(product)
        return output, torch.stack(tangents)

    def advance_renormalize(state, frame):
        output, tangents = advance(state, frame)
        frame, log_r = orthonormalize_frame(tangents, batch)
        finite = (output.reshape(batch, -1) * 0).sum(1) == 0  # as `loop_functions`: NaN where x is not finite
        return output, frame, log_r, finite

    step = TangentStep("linearized", advance, advance_renormalize)
    step.graph = graph
    return step
