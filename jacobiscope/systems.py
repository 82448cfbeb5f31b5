"""Ready-made looped maps: the classical reference systems, and a random looped self-attention (ItrSA form).

The classical maps have known exponents (logistic r=4: ln 2; Hénon 1.4/0.3: 0.4192, -1.6232; linear maps:
log|eigenvalues|), so they calibrate the engine; the attention map is the smallest honest stand-in for a looped
transformer block and the bundled default of the engine demo.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .errors import ArgumentError
from .maps import LoopedMap
from ._validation import _is_int, as_int, floating_dtype, positive_int, seed_int

#: The largest state a ready-made system builds (tokens x dim x batch entries): beyond it the constructor would
#: allocate for minutes or fail in the allocator.
MAX_ENTRIES = 50_000_000


def _real(value, name: str, example, *, positive: bool = False) -> float:
    """A finite real parameter (a NaN or Inf one would give a trajectory of NaN from loop 1, warned as a divergence
    of the map instead of the typo it is)."""
    import numbers

    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
          and (value > 0 if positive else True))
    if not ok:
        kind = "a finite number > 0" if positive else "a finite number"
        raise ArgumentError(f"{name} must be {kind}, got {value!r} — pass e.g. {name}={example}")
    return float(value)


def _batch(batch, per_trajectory: int):
    if batch is None:
        return None
    batch = positive_int(batch, "batch")
    if batch * per_trajectory > MAX_ENTRIES:
        raise ArgumentError(f"batch={batch} would build {batch * per_trajectory} state entries, over the budget of "
                            f"{MAX_ENTRIES} — pass a smaller batch")
    return batch

__all__ = ["logistic_map", "henon_map", "lorenz96_map", "linear_map", "self_attention_map", "LoopedSelfAttention"]


class _Logistic(nn.Module):
    def __init__(self, r: float):
        super().__init__()
        self.register_buffer("r", torch.tensor(float(r), dtype=torch.float64))

    def forward(self, x):
        return self.r * x * (1 - x)


class _Henon(nn.Module):
    def __init__(self, a: float, b: float):
        super().__init__()
        self.register_buffer("a", torch.tensor(float(a), dtype=torch.float64))
        self.register_buffer("b", torch.tensor(float(b), dtype=torch.float64))

    def forward(self, x):
        first = 1 - self.a * x[..., 0] ** 2 + x[..., 1]
        second = self.b * x[..., 0]
        return torch.stack([first, second], dim=-1)


class _Lorenz96(nn.Module):
    """One RK4 step of ``dx_i/dt = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F`` (indices mod N, last dimension)."""

    def __init__(self, forcing: float, dt: float):
        super().__init__()
        self.register_buffer("forcing", torch.tensor(float(forcing), dtype=torch.float64))
        self.dt = dt

    def field(self, x):
        return (torch.roll(x, -1, -1) - torch.roll(x, 2, -1)) * torch.roll(x, 1, -1) - x + self.forcing

    def forward(self, x):
        k1 = self.field(x)
        k2 = self.field(x + self.dt / 2 * k1)
        k3 = self.field(x + self.dt / 2 * k2)
        k4 = self.field(x + self.dt * k3)
        return x + self.dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def extra_repr(self) -> str:
        return f"dt={self.dt}"


class _Linear(nn.Module):
    def __init__(self, matrix: torch.Tensor):
        super().__init__()
        self.register_buffer("matrix", matrix)

    def forward(self, x):
        return x @ self.matrix.T


def logistic_map(r: float = 4.0, *, batch: int | None = None, seed: int = 0) -> LoopedMap:
    """The logistic map ``x -> r x (1 - x)`` in float64; at ``r = 4`` its exponent is exactly ``ln 2``.

    Example::

        >>> import jacobiscope
        >>> m = jacobiscope.systems.logistic_map()
        >>> float(m(m.x0))
        0.84

    ``batch=n`` gives ``n`` independent trajectories (``batch_dims=1``) started uniformly in (0.05, 0.95).
    """
    r = _real(r, "r", 4.0)
    batch, seed = _batch(batch, 1), seed_int(seed)
    if batch is None:
        return LoopedMap(_Logistic(r), x0=torch.tensor(0.3, dtype=torch.float64), name=f"logistic(r={r})")
    generator = torch.Generator().manual_seed(seed)
    x0 = 0.05 + 0.9 * torch.rand(batch, generator=generator, dtype=torch.float64)
    return LoopedMap(_Logistic(r), batch_dims=1, x0=x0, name=f"logistic(r={r})")


def henon_map(a: float = 1.4, b: float = 0.3, *, batch: int | None = None, seed: int = 0) -> LoopedMap:
    """The Hénon map ``(x, y) -> (1 - a x^2 + y, b x)`` in float64.

    Example::

        >>> import jacobiscope
        >>> m = jacobiscope.systems.henon_map()
        >>> m(m.x0).tolist()
        [1.086, 0.03]

    At ``a = 1.4, b = 0.3`` the exponents are about 0.4192 and -1.6232 (Sprott) and sum to ``ln 0.3`` exactly
    (``|det J| = b`` everywhere). ``batch=n`` starts ``n`` trajectories near the origin, inside the basin.
    """
    a, b = _real(a, "a", 1.4), _real(b, "b", 0.3)
    batch, seed = _batch(batch, 2), seed_int(seed)
    name = f"henon(a={a}, b={b})"
    if batch is None:
        return LoopedMap(_Henon(a, b), x0=torch.tensor([0.1, 0.1], dtype=torch.float64), name=name)
    generator = torch.Generator().manual_seed(seed)
    x0 = 0.1 + 0.05 * torch.randn(batch, 2, generator=generator, dtype=torch.float64)
    return LoopedMap(_Henon(a, b), batch_dims=1, x0=x0, name=name)


def lorenz96_map(n: int = 40, forcing: float = 8.0, dt: float = 0.01, *, batch: int | None = None,
                 seed: int = 0) -> LoopedMap:
    """Lorenz-96 with ``n`` sites and forcing ``F``, one RK4 step of ``dt`` per loop, in float64.

    Example::

        >>> import jacobiscope
        >>> m = jacobiscope.systems.lorenz96_map(5)
        >>> [round(v, 4) for v in m(m.x0).tolist()]   # near the fixed point x_i = F, which the 0.01 ramp breaks
        [7.9983, 8.0085, 8.0223, 8.0321, 8.0378]

    At ``n = 40, F = 8`` the flow is chaotic (largest exponent ~1.7 per unit time, ~0.017 per loop of 0.01): a
    standard test of Lyapunov-spectrum codes with a full spectrum of 40. ``x0`` is ``F`` plus a 0.01 ramp;
    ``batch=n`` adds small random offsets per trajectory.
    """
    n = positive_int(n, "n")
    if n < 4:
        raise ArgumentError(f"n must be at least 4 (each site couples to i-2, i-1 and i+1), got {n} — pass n=40")
    forcing, dt = _real(forcing, "forcing", 8.0), _real(dt, "dt", 0.01, positive=True)
    batch, seed = _batch(batch, n), seed_int(seed)
    x0 = forcing + 0.01 * torch.arange(n, dtype=torch.float64)
    name = f"lorenz96(N={n}, F={forcing}, dt={dt})"
    if batch is None:
        return LoopedMap(_Lorenz96(forcing, dt), x0=x0, name=name)
    generator = torch.Generator().manual_seed(seed)
    x0 = x0 + 0.01 * torch.randn(batch, n, generator=generator, dtype=torch.float64)
    return LoopedMap(_Lorenz96(forcing, dt), batch_dims=1, x0=x0, name=name)


def linear_map(matrix: torch.Tensor, *, x0: torch.Tensor | None = None) -> LoopedMap:
    """The linear map ``x -> A x`` (on the last dimension, so leading dims may be a batch).

    Example::

        >>> import torch, jacobiscope
        >>> m = jacobiscope.systems.linear_map(torch.diag(torch.tensor([1.1, 0.8], dtype=torch.float64)))
        >>> m(torch.ones(2, dtype=torch.float64)).tolist()
        [1.1, 0.8]

    Its Lyapunov exponents are ``log |eigenvalues of A|``; its Jacobian is ``A`` everywhere.
    """
    try:
        matrix = torch.as_tensor(matrix)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ArgumentError(f"linear_map needs a square matrix (a tensor or nested lists of numbers), got "
                            f"{type(matrix).__name__} — pass e.g. torch.eye(2)") from error
    if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1] or matrix.numel() == 0:
        raise ArgumentError(f"linear_map needs a square matrix, got shape {tuple(matrix.shape)} — pass a [D, D] "
                            "matrix, e.g. torch.eye(2)")
    if matrix.is_complex():
        raise ArgumentError(f"linear_map needs a real matrix, got {matrix.dtype} — states are real; a complex A acts "
                            "on R^2D as the real block matrix [[A.real, -A.imag], [A.imag, A.real]] (the same "
                            "exponents, each twice)")
    if not matrix.is_floating_point():
        matrix = matrix.to(torch.get_default_dtype())  # integer entries: a map of states needs a floating dtype
    if not bool(torch.isfinite(matrix).all()):
        raise ArgumentError(f"linear_map's matrix holds {int((~torch.isfinite(matrix)).sum())} NaN/Inf entries — "
                            "pass a finite matrix")
    if x0 is None:
        x0 = torch.ones(matrix.shape[0], dtype=matrix.dtype)
    elif not isinstance(x0, torch.Tensor) or x0.dim() == 0 or x0.shape[-1] != matrix.shape[0]:
        shown = tuple(x0.shape) if isinstance(x0, torch.Tensor) else type(x0).__name__
        raise ArgumentError(f"x0 must be a tensor whose last dimension is the matrix's {matrix.shape[0]}, got {shown} "
                            f"— pass e.g. x0=torch.ones({matrix.shape[0]})")
    return LoopedMap(_Linear(matrix), x0=x0, name=f"linear({matrix.shape[0]}x{matrix.shape[0]})")


class LoopedSelfAttention(nn.Module):
    """One looped multi-head self-attention step in the ItrSA form ``X <- Norm(X + eta (MSA(X) + C))``.

    Example::

        >>> import torch, jacobiscope
        >>> block = jacobiscope.systems.LoopedSelfAttention(dim=8, heads=2, eta=0.5)
        >>> block(torch.randn(4, 8)).shape
        torch.Size([4, 8])

    ``X`` is ``[*batch, tokens, dim]``; ``C`` (``injection``, a buffer, default zero) is the input injection
    of a looped solver; ``norm`` is ``"rmsnorm"`` (learnable gain, as in the paper), ``"layernorm"`` or
    ``"none"``. Attention is written out (no fused kernel), so forward-mode AD and ``vmap`` pass through it.
    `drive` returns ``Y = MSA(X) + C``, whose pseudo-energy is ``-Tr(X^T Y)``.
    """

    def __init__(self, dim: int, heads: int = 1, eta: float = 1.0, norm: str = "rmsnorm", bias: bool = False,
                 eps: float = 1e-6):
        super().__init__()
        dim, heads = positive_int(dim, "dim"), positive_int(heads, "heads")
        if dim % heads:
            raise ArgumentError(f"dim={dim} must be divisible by heads={heads} — pass heads that divides dim (e.g. "
                                f"heads=1).")
        if norm not in ("rmsnorm", "layernorm", "none"):
            raise ArgumentError(f"norm must be 'rmsnorm', 'layernorm' or 'none', got {norm!r} — pass one of them.")
        eta, eps = _real(eta, "eta", 1.0), _real(eps, "eps", 1e-6, positive=True)
        self.dim, self.heads, self.eta, self.norm, self.eps = dim, heads, float(eta), norm, eps
        self.query = nn.Linear(dim, dim, bias=bias)
        self.key = nn.Linear(dim, dim, bias=bias)
        self.value = nn.Linear(dim, dim, bias=bias)
        self.output = nn.Linear(dim, dim, bias=bias)
        self.gain = nn.Parameter(torch.ones(dim))
        self.register_buffer("injection", torch.zeros(()))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        *batch, tokens, dim = x.shape
        head_dim = dim // self.heads

        def split(t):
            return t.reshape(*batch, tokens, self.heads, head_dim).transpose(-2, -3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
        mixed = torch.softmax(scores, dim=-1) @ v
        return self.output(mixed.transpose(-2, -3).reshape(*batch, tokens, dim))

    def drive(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x) + self.injection

    def normalize(self, z: torch.Tensor) -> torch.Tensor:
        if self.norm == "rmsnorm":
            return self.gain * z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.norm == "layernorm":
            centered = z - z.mean(-1, keepdim=True)
            return self.gain * centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + self.eps)
        return z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x + self.eta * self.drive(x))


def self_attention_map(
    tokens: int = 16,
    dim: int = 32,
    heads: int = 4,
    *,
    eta: float = 1.0,
    norm: str = "rmsnorm",
    weight_scale: float = 1.0,
    injection: bool = False,
    batch: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> LoopedMap:
    """A random looped self-attention map in the ItrSA form, with a random unit-RMS initial state.

    Example::

        >>> import jacobiscope
        >>> m = jacobiscope.systems.self_attention_map(tokens=4, dim=8, heads=2)
        >>> tuple(m.x0.shape), m(m.x0).shape == m.x0.shape
        ((4, 8), True)

    Weights are Gaussian with standard deviation ``weight_scale / sqrt(dim)`` (so ``weight_scale`` sets the
    weights' spectral scale); ``injection=True`` adds a random input injection ``C``. ``batch=n`` gives ``n``
    independent initial states (``batch_dims=1``). The map has a drive, so `pseudo_energy` works on it.
    """
    tokens, dim = positive_int(tokens, "tokens"), positive_int(dim, "dim")
    batch = _batch(batch, tokens * dim)
    if tokens * dim > MAX_ENTRIES or 4 * dim * dim > MAX_ENTRIES:
        raise ArgumentError(f"tokens={tokens} x dim={dim} is over the budget of {MAX_ENTRIES} entries (state and "
                            "four dim x dim weights) — pass smaller tokens / dim")
    weight_scale = _real(weight_scale, "weight_scale", 1.0)
    floating_dtype(dtype, "dtype")
    seed = seed_int(seed)
    generator = torch.Generator().manual_seed(seed)
    block = LoopedSelfAttention(dim, heads, eta=eta, norm=norm)
    with torch.no_grad():
        for linear in (block.query, block.key, block.value, block.output):
            linear.weight.copy_(torch.randn(dim, dim, generator=generator) * weight_scale / math.sqrt(dim))
        if injection:
            block.injection = torch.randn(tokens, dim, generator=generator)
    block = block.to(dtype).eval()
    shape = (tokens, dim) if batch is None else (batch, tokens, dim)
    x0 = torch.randn(*shape, generator=generator).to(dtype)
    x0 = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True))
    return LoopedMap(
        block,
        batch_dims=0 if batch is None else 1,
        state_shape=(tokens, dim),
        drive=block.drive,
        x0=x0,
        name=f"self_attention(tokens={tokens}, dim={dim}, heads={heads}, eta={eta}, norm={norm})",
    )
