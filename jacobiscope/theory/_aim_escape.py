"""Teachers and the escape-from-an-uninformative-start experiment of online SGD (spec B.4)."""
from __future__ import annotations

import torch

from ..errors import ArgumentError
from ._aim_checks import count, finite, square
from ._aim_sgd import online_sgd


def make_teacher(d: int, kind: str = "goe", *, rank_ratio: float = 0.5, seed: int = 0,
                 dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """A teacher ``S*`` normalized to ``rho = tau(S* S*^T) = 1``: a GOE matrix, or a PSD Wishart one.

    Example::

        >>> from jacobiscope.theory.aim import make_teacher, order_parameters
        >>> T = make_teacher(50, "psd", seed=1)
        >>> round(float(order_parameters(T, T)["rho"]), 12), bool((T - T.T).abs().max() == 0)
        (1.0, True)

    Arguments:
        d: dimension; kind: ``"goe"`` (``(G + G^T)/sqrt(2 d)``: indefinite, trace ~ 0, the spec's B.4 teacher) or
        ``"psd"`` (``W W^T`` with ``W [d, rank_ratio d]``: Marchenko–Pastur spectrum, ``Tr S* = O(d)``; the spec's
        choice for tied students under odd links); seed, dtype, device: of the draw (made on the CPU).

    References: theory spec B.1, B.3 (truncation setup), B.4.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise ArgumentError(f"d must be an int >= 2, got {d!r}.")
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    if kind == "goe":
        G = torch.randn(d, d, generator=g, dtype=dtype)
        T = G + G.T
    elif kind == "psd":
        if not 0 < rank_ratio <= 1:
            raise ArgumentError(f"rank_ratio = r*/d must be in (0, 1], got {rank_ratio!r}.")
        W = torch.randn(d, max(int(round(rank_ratio * d)), 1), generator=g, dtype=dtype)
        T = W @ W.T
        T = (T + T.T) / 2   # exactly symmetric: a BLAS kernel may round W W^T's two triangles differently
    else:
        raise ArgumentError(f"kind must be 'goe' or 'psd', got {kind!r}.")
    T = T / ((T * T).sum() / d).sqrt()
    return T.to(device) if device is not None else T


def escape_runs(S_star: torch.Tensor | None = None, *, d: int = 16, link: str = "he2", t: float = 2.0,
                eta: float = 0.01, runs: int = 2, init_scale: float = 0.5, clip: float | None = None,
                centering: bool = False, seed: int = 0, records: int = 200, random_direct: bool = True) -> dict:
    """Online SGD of every parameterization from an uninformative start: the data of the escape curves.

    Example::

        >>> from jacobiscope.theory.aim import escape_runs
        >>> out = escape_runs(d=8, t=0.2, runs=1, records=4)
        >>> list(out), bool((out["direct, S0 = 0"].S == 0).all())     # He2: S = 0 never moves
        (['direct, S0 = 0', 'direct, random S0', 'tied', 'untied'], True)

    Arguments:
        S_star: teacher ``[d, d]`` (default ``make_teacher(d, "goe", seed=seed)``, the spec's B.4 setting).
        d: dimension when ``S_star`` is not given; link: as `online_sgd`.
        t: gradient-flow horizon (``steps = t d^2 / eta``); eta, clip, centering, seed: as `online_sgd`. Small
            ``d`` needs a smaller ``eta`` than the spec's 0.05 at d = 100 (the default 0.01 keeps He1/He2/softmax
            stable at d = 16 without clipping; He3 can still diverge, and clipping biases its drift, see
            `online_sgd`).
        runs: independent runs per parameterization; init_scale: ``sigma_0`` of the random starts.
        records: about this many recorded times.
        random_direct: also run the direct student from a random GOE ``S0`` of scale ``sigma_0`` (spec B.4: He2 is
            stuck only at the exact critical point ``S0 = 0``).

    Returns:
        ``{label: AIMRun}`` with labels ``"direct, S0 = 0"``, ``"direct, random S0"`` (if asked), ``"tied"``,
        ``"untied"``; each run's ``escape_time`` is the first time with weak recovery (``inf`` if never).

    References: theory spec B.4 (claims versus this model), B.5.
    """
    t, eta = finite(t, "t", low=0, example="2.0"), finite(eta, "eta", low=0, example="0.01")
    count(runs, "runs", "2")
    count(records, "records", "200")
    if S_star is None:
        S_star = make_teacher(d, "goe", seed=seed)
    d = square(S_star, "S_star").shape[-1]
    steps = max(int(round(t * d * d / eta)), 1)
    every = max(steps // max(int(records), 1), 1)
    common = dict(link=link, steps=steps, eta=eta, runs=runs, clip=clip, centering=centering,
                  record_every=every, init_scale=init_scale)
    out = {"direct, S0 = 0": online_sgd(S_star, parameterization="direct", seed=seed + 1,
                                        S0=torch.zeros_like(S_star), **common)}
    if random_direct:
        out["direct, random S0"] = online_sgd(S_star, parameterization="direct", seed=seed + 2, **common)
    out["tied"] = online_sgd(S_star, parameterization="tied", seed=seed + 3, **common)
    out["untied"] = online_sgd(S_star, parameterization="untied", seed=seed + 4, **common)
    return out
