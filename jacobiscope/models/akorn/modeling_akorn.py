"""AKOrN for Sudoku: artificial Kuramoto oscillatory neurons (Miyato et al., ICLR 2025), as a transformers model.

Oscillators of dimension N live on unit spheres (``hidden_size / N`` per cell). One loop:

    y = J(x) + c,   x <- normalize(x + gamma * (Omega x + y - <y, x> x))

with J multi-head self-attention over the 81 cells (2-D rotary positions on queries and keys), c the embedded
puzzle, Omega a rotation generator with one learnable frequency on channel pairs, gamma learnable. Givens start at
their embedding, blanks at Gaussian noise; the readout is invariant to the oscillators' phase (a norm over N).
Energy voting: several noise draws per puzzle, the one with the lowest summed pseudo-energy ``-Tr(x^T y)`` wins.

Departure from the AKOrN repo, said here and in the model card: the repo's geometric transform attention (GTA:
learnable per-token rotations of q, k and v) is replaced by 2-D rotary embeddings on q and k.

Single-model-file policy: only torch, transformers and the configuration are imported (``loop_map`` imports
jacobiscope lazily).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_akorn import AKOrNConfig

__all__ = ["AKOrNForSudoku", "AKOrNSudokuOutput"]


@dataclass
class AKOrNSudokuOutput(ModelOutput):
    """``loss``, ``logits [N, 81, 9]``, optionally ``energies [N, loops]`` and ``states [loops + 1, N, 81, dim]``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    energies: torch.Tensor | None = None
    states: torch.Tensor | None = None


def _rotary_tables(head_dim: int, base: float = 10000.0):
    """cos/sin ``[81, head_dim]``: the first half of each head rotates with the row, the second with the column."""
    quarter = head_dim // 4
    frequencies = base ** (-torch.arange(quarter, dtype=torch.float64) / max(quarter, 1))
    rows = torch.arange(81, dtype=torch.float64) // 9
    cols = torch.arange(81, dtype=torch.float64) % 9
    angles = torch.cat([rows[:, None] * frequencies, cols[:, None] * frequencies], dim=1)  # [81, head_dim / 2]
    angles = torch.repeat_interleave(angles, 2, dim=1)  # pairs (2i, 2i+1) share an angle
    return angles.cos().float(), angles.sin().float()


def _rotate(t, cos, sin):
    pairs = t.reshape(*t.shape[:-1], -1, 2)
    rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(t.shape)
    return t * cos + rotated * sin


class _Coupling(nn.Module):
    """J: multi-head self-attention over the cells with 2-D rotary positions."""

    def __init__(self, config: AKOrNConfig):
        super().__init__()
        dim, self.heads = config.hidden_size, config.num_heads
        self.head_dim = dim // self.heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.output = nn.Linear(dim, dim)
        # Not buffers: transformers 5 builds models on the meta device and loads only saved tensors, so
        # non-persistent buffers would come back uninitialized. The tables are cheap and cached per device/dtype.
        self._tables: dict = {}

    def forward(self, x):
        n, cells, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, cells, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self._rotary(x.device, x.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        mixed = F.scaled_dot_product_attention(q, k, v)
        return self.output(mixed.transpose(1, 2).reshape(n, cells, dim))

    def _rotary(self, device, dtype):
        """The cached cos/sin tables for this device and dtype, always plain tensors: a first call inside
        ``torch.func.jvp`` / ``vmap`` / ``grad`` would otherwise cache the transform's wrapped tensors, which break
        every later copy or cast of the model ("Cannot access storage of TensorWrapper")."""
        key = (device, dtype)
        if key not in self._tables:
            disable = getattr(torch._C, "_DisableFuncTorch", None)  # builds the tables outside any transform
            with disable() if disable is not None else contextlib.nullcontext():
                cos, sin = _rotary_tables(self.head_dim)
                tables = (cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype))
            wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
            if wrapped is not None and wrapped(tables[0]):
                return tables  # use them for this call only: never cache a transform's tensors
            self._tables[key] = tables
        return self._tables[key]


class AKOrNForSudoku(PreTrainedModel):
    """AKOrN Sudoku solver.

    Example::

        >>> import torch
        >>> from jacobiscope.models import AKOrNConfig, AKOrNForSudoku
        >>> model = AKOrNForSudoku(AKOrNConfig(hidden_size=16, num_heads=2, oscillator_dim=4, loops=2))
        >>> out = model(torch.zeros(2, 81, dtype=torch.long), labels=torch.ones(2, 81, dtype=torch.long))
        >>> tuple(out.logits.shape)
        (2, 81, 9)

    ``forward(input_ids, labels=None, loops=None, return_energies=False, return_states=False, noise=None,
    generator=None)``; ``noise`` (``[N, 81, dim]``) fixes the blanks' initial state, else it is drawn (from
    ``generator`` when given). `solve(puzzles, loops, votes)` does energy voting; `loop_map` gives the recurrence.
    """

    config_class = AKOrNConfig
    base_model_prefix = "akorn"
    main_input_name = "input_ids"
    _no_split_modules = []
    # What the recurrence applies every loop (the weights a spectral penalty acts on), and the attention inside it
    # (fused qkv + output: read by the energy penalties): declared, so jacobiscope never matches class names.
    _looped_modules = ["coupling"]
    _looped_attention = ["coupling"]
    # forward takes **kwargs (Trainer passes extras) but its loss is a plain mean: let Trainer scale it under
    # gradient accumulation instead of assuming the model normalizes by num_items_in_batch.
    accepts_loss_kwargs = False
    # True: a training forward (train mode, gradients on) runs each loop through `torch.compile` (see
    # `_compiled_loop_body`); the math is the same, rounding aside. An execution setting, never saved with the weights.
    compile_loop = False

    def __init__(self, config: AKOrNConfig):
        super().__init__(config)
        dim, N = config.hidden_size, config.oscillator_dim
        self.embed = nn.Embedding(10, dim)
        self.unit_embed = nn.Embedding(27, dim) if config.unit_embeddings else None  # 9 rows, 9 columns, 9 boxes
        self.coupling = _Coupling(config)
        self.gamma = nn.Parameter(torch.tensor(float(config.gamma_init)))
        self.omega = nn.Parameter(torch.full((2,), config.omega_init / math.sqrt(2)))
        self.drive_gain = nn.Parameter(torch.ones(dim)) if config.oscillator_norm else None
        self.readout = nn.Linear(dim, dim * N)
        self.readout_bias = nn.Parameter(torch.zeros(dim))
        self.ff1 = nn.Linear(dim, dim)
        self.ff2 = nn.Linear(dim, dim)
        self.ff3 = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 9)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=1.0 / math.sqrt(module.in_features))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)

    # ------------------------------------------------------------------ oscillators
    def _groups(self, x):
        return x.reshape(*x.shape[:-1], -1, self.config.oscillator_dim)

    def normalize(self, x):
        groups = self._groups(x)
        return (groups / groups.norm(dim=-1, keepdim=True).clamp_min(1e-12)).reshape(x.shape)

    def rotation(self, x):
        """``Omega x``: ``(c0, c1) -> (omega c1, -omega c0)`` on consecutive channel pairs (tangent already)."""
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        omega = self.omega.norm()
        return (omega * torch.stack([pairs[..., 1], -pairs[..., 0]], dim=-1)).reshape(x.shape)

    def drive(self, x, injection):
        """``y = J(x) + c`` (RMS-normalized per oscillator when ``config.oscillator_norm``)."""
        y = self.coupling(x) + injection
        if self.drive_gain is not None:
            groups = self._groups(y)
            y = (groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + 1e-6)).reshape(y.shape) * self.drive_gain
        return y

    def step(self, x, injection):
        y = self.drive(x, injection)
        return self._update(x, y)

    def _update(self, x, y):
        groups_x, groups_y = self._groups(x), self._groups(y)
        tangent = (groups_y - (groups_y * groups_x).sum(-1, keepdim=True) * groups_x).reshape(x.shape)
        return self.normalize(x + self.gamma * (self.rotation(x) + tangent))

    def injection(self, input_ids):
        _check_puzzles(input_ids)
        return self._injection_of_checked(input_ids)

    def _injection_of_checked(self, input_ids):
        # No check: a loop map validates its puzzles once; re-checking every loop costs host syncs and keeps the
        # Lyapunov engine from tracing the loop.
        c = self.embed(input_ids)
        if self.unit_embed is not None:
            cells = torch.arange(81, device=input_ids.device)
            units = torch.stack([cells // 9, 9 + cells % 9, 18 + (cells // 27) * 3 + (cells % 9) // 3])
            c = c + self.unit_embed(units).sum(0)
        return c

    def initial_state(self, input_ids, injection, noise=None, generator=None):
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}. Pass "
                            "torch.Generator().manual_seed(seed).")
        if noise is not None and (not isinstance(noise, torch.Tensor) or noise.shape != injection.shape
                                  or not noise.is_floating_point()):
            got = (f"{tuple(noise.shape)} {noise.dtype}" if isinstance(noise, torch.Tensor) else type(noise).__name__)
            raise ValueError(f"noise must be a float tensor shaped like the state {tuple(injection.shape)} "
                             f"([N, 81, hidden_size]), got {got}. Pass None to draw it.")
        if noise is None:
            # Drawn in float32 whatever the model's dtype: one seed, one start state (a float64 copy of a model, as
            # its card measures its dynamics, starts where the float32 model starts, to rounding).
            noise = torch.randn(injection.shape, generator=generator, device=injection.device,
                                dtype=torch.float32).to(injection.dtype)
        given = (input_ids > 0).unsqueeze(-1).to(injection.dtype)
        return self.normalize(given * injection + (1 - given) * noise)

    def read(self, x):
        n, cells, dim = x.shape
        features = self.readout(x).reshape(n, cells, dim, self.config.oscillator_dim).norm(dim=-1) + self.readout_bias
        features = features + self.ff2(F.relu(self.ff1(F.relu(features))))
        features = self.ff3(F.relu(features))
        return self.head(F.relu(features))

    def forward(self, input_ids, labels=None, loops: int | None = None, return_energies: bool = False,
                return_states: bool = False, noise=None, generator=None, supervise_every: int | None = None,
                **kwargs) -> AKOrNSudokuOutput:
        """``supervise_every=k`` (with labels): the loss is the mean cross-entropy of the readouts after loops
        ``k, 2k, ...`` and after the last loop, so the state must be right early and stay right."""
        loops = self.config.loops if loops is None else _count("loops", loops, _MAX_LOOPS, "loops=16")
        injection = self.injection(input_ids)
        if labels is not None:
            _check_labels(labels, input_ids)
        x = self.initial_state(input_ids, injection, noise, generator)
        energies, states = [], [x] if return_states else None
        losses = []
        # Only training forwards compile: evaluation copies of the model (new objects every validation) stay eager.
        body = (_compiled_loop_body() if self.compile_loop and self.training and torch.is_grad_enabled()
                else _loop_body)
        if body is not _loop_body:  # build the rotary tables eagerly: their first build is not traceable
            self.coupling._rotary(x.device, x.dtype)
        for t in range(1, loops + 1):
            y, next_x = body(self, x, injection)
            if return_energies:
                energies.append(-(x * y).sum(dim=(-1, -2)))
            x = next_x
            if return_states:
                states.append(x)
            if labels is not None and supervise_every and t % supervise_every == 0 and t < loops:
                losses.append(_cross_entropy(self.read(x), labels))
        logits = self.read(x)
        loss = None
        if labels is not None:
            loss = torch.stack(losses + [_cross_entropy(logits, labels)]).mean()
        return AKOrNSudokuOutput(loss=loss, logits=logits,
                                 energies=torch.stack(energies, dim=1) if return_energies else None,
                                 states=torch.stack(states) if return_states else None)

    @torch.no_grad()
    def solve(self, puzzles, loops: int = 16, votes: int = 1, batch_size: int = 200, seed: int = 0) -> torch.Tensor:
        """Complete puzzles (strings or ``[N, 81]`` ints) -> ``[N, 81]``; with ``votes=K`` each puzzle is run from K
        noise draws and the draw with the lowest summed pseudo-energy is kept (AKOrN's energy voting).

        ``loops``, ``votes`` and ``batch_size`` are positive ints (``votes <= batch_size``: a puzzle's draws run in
        one batch), ``seed`` an int; bad puzzles or arguments raise ValueError / TypeError."""
        loops, votes, batch_size = _solve_arguments(loops, votes, batch_size, seed)
        input_ids = _as_puzzle_tensor(puzzles).to(self.device)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        out = []
        per_chunk = max(1, batch_size // votes)
        for start in range(0, input_ids.shape[0], per_chunk):
            chunk = input_ids[start : start + per_chunk]
            repeated = chunk.repeat_interleave(votes, dim=0)
            result = self(repeated, loops=loops, return_energies=votes > 1, generator=generator)
            digits = result.logits.argmax(-1) + 1
            if votes > 1:
                scores = result.energies.sum(1).reshape(chunk.shape[0], votes)
                best = scores.argmin(1)
                digits = digits.reshape(chunk.shape[0], votes, 81)[torch.arange(chunk.shape[0]), best]
            out.append(torch.where(chunk > 0, chunk, digits))
        return torch.cat(out)

    @torch.no_grad()
    def solve_along(self, puzzles, loops=(16, 32, 64, 128), votes: int = 1, batch_size: int = 200,
                    seed: int = 0) -> dict:
        """Complete puzzles at several loop counts from one trajectory per noise draw: ``{T: [N, 81]}``.

        The same numbers as ``solve(puzzles, loops=T, votes=votes, seed=seed)`` for every ``T`` (the same noise
        draws; with votes, the draw with the lowest pseudo-energy summed over loops ``1..T`` wins at ``T``), for
        the cost of ``max(loops)`` loops rather than their sum.
        """
        counts = _loop_counts(loops)
        _, votes, batch_size = _solve_arguments(counts[0], votes, batch_size, seed)
        input_ids = _as_puzzle_tensor(puzzles).to(self.device)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        out = {count: [] for count in counts}
        per_chunk = max(1, batch_size // votes)
        for start in range(0, input_ids.shape[0], per_chunk):
            chunk = input_ids[start : start + per_chunk]
            repeated = chunk.repeat_interleave(votes, dim=0)
            injection = self.injection(repeated)
            x = self.initial_state(repeated, injection, None, generator)
            energy, done = torch.zeros(repeated.shape[0], device=x.device, dtype=x.dtype), 0
            for count in counts:
                for _ in range(count - done):
                    y = self.drive(x, injection)
                    energy = energy - (x * y).sum(dim=(-1, -2))
                    x = self._update(x, y)
                done = count
                digits = self.read(x).argmax(-1) + 1
                if votes > 1:
                    best = energy.reshape(chunk.shape[0], votes).argmin(1)
                    digits = digits.reshape(chunk.shape[0], votes, 81)[torch.arange(chunk.shape[0]), best]
                out[count].append(torch.where(chunk > 0, chunk, digits))
        return {count: torch.cat(parts) if parts else input_ids.clone() for count, parts in out.items()}

    # jacobiscope's public recurrence protocol (plain Python, no import): `jacobiscope.analyze` and
    # `jacobiscope.native_loop` read the loop from it, as for any looped model.
    jacobiscope_recurrences = ("loop",)

    def jacobiscope_recurrence(self, name: str, input_ids, seed: int = 0) -> dict:
        """The exact recurrence (projection and renormalization included) on these puzzles, in jacobiscope's
        recurrence protocol: one loop as ``step`` (``batch_dims=1``), ``x0`` the initial state (the blanks' noise
        drawn from ``seed``), the trained ``loops``, a drive, and the digit logits (``readout``) and whether the
        grids are solved (``quality``) for the loop-depth sweep."""
        if name != "loop":
            raise ValueError(f"AKOrNForSudoku has one recurrence, 'loop'; got {name!r}. Pass recurrence='loop'.")
        _check_seed(seed)
        input_ids = _as_puzzle_tensor(input_ids).to(self.device)
        step = _AKOrNLoop(self, input_ids)
        with torch.no_grad():
            injection = self.injection(input_ids)
            generator = torch.Generator(device=self.device).manual_seed(seed)
            x0 = self.initial_state(input_ids, injection, generator=generator)
        return {"step": step, "x0": x0, "batch_dims": 1, "drive": step.drive,
                "description": f"akorn-sudoku loop (N={self.config.oscillator_dim})",
                **_readouts(lambda x: self.read(x), input_ids, self.config.loops)}

    def loop_map(self, input_ids, seed: int = 0):
        """The exact recurrence (projection and renormalization included) on these puzzles as a
        `jacobiscope.LoopedMap`; the blanks' initial noise is drawn from ``seed``. A convenience for
        ``jacobiscope.native_loop(model, {"input_ids": input_ids, "seed": seed})``."""
        # importlib, not an import statement: transformers scans remote code for imports and would otherwise
        # demand jacobiscope from Hub users who never call loop_map.
        native_loop = importlib.import_module("jacobiscope").native_loop

        _check_seed(seed)
        input_ids = _as_puzzle_tensor(input_ids)  # the puzzles' own errors, before jacobiscope wraps them
        looped = native_loop(self, {"input_ids": input_ids, "seed": seed})
        looped.name, looped.info.model = looped.info.description, "AKOrNForSudoku"
        return looped

    def loop_inputs(self, puzzles) -> torch.Tensor:
        """Puzzles (81-character strings, ``0`` or ``.`` for blanks, or an ``[N, 81]`` int tensor) as the ``[N, 81]``
        ids `loop_map` takes; `jacobiscope.analyze` calls it for inputs that are not tensors yet."""
        return _as_puzzle_tensor(puzzles)

    def loop_outcome(self, input_ids, loops: int) -> list[dict]:
        """What the model makes of each puzzle after ``loops`` loops, for `jacobiscope.analyze`: one dict per
        puzzle, ``{"solved": bool, "givens": int}``. Solved means the completed grid is a valid Sudoku that keeps
        the givens (any valid completion counts, so no reference solution is needed)."""
        puzzles = _as_puzzle_tensor(input_ids).to(self.device)
        grids = self.solve(puzzles, loops=loops)
        solved = _is_solution(grids)
        givens = (puzzles > 0).sum(-1)
        return [{"solved": bool(ok), "givens": int(count)} for ok, count in zip(solved.tolist(), givens.tolist())]


class _AKOrNLoop(nn.Module):
    def __init__(self, model: AKOrNForSudoku, input_ids: torch.Tensor):
        super().__init__()
        self.model = model
        self.register_buffer("input_ids", input_ids, persistent=False)
        self.training = False

    def drive(self, x):
        return self.model.drive(x, self.model._injection_of_checked(self.input_ids))

    def forward(self, x):
        return self.model.step(x, self.model._injection_of_checked(self.input_ids))


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int (it seeds the blanks' noise draws), got {seed!r} "
                        f"({type(seed).__name__}). Pass e.g. seed=0.")


def _solve_arguments(loops, votes, batch_size, seed) -> tuple[int, int, int]:
    """``solve`` / ``solve_along``'s counts, checked: positive ints, and at most ``batch_size`` votes (all the
    draws of one puzzle run in one batch, so more would break the batch's memory bound)."""
    loops = _count("loops", loops, _MAX_LOOPS, "loops=16")
    votes = _count("votes", votes, None, "votes=1 (or 16 for energy voting)")
    batch_size = _count("batch_size", batch_size, None, "batch_size=200")
    if votes > batch_size:
        raise ValueError(f"votes={votes} is more than batch_size={batch_size}: the draws of one puzzle run in one "
                         "batch. Raise batch_size to at least votes, or use fewer votes.")
    _check_seed(seed)
    return loops, votes, batch_size


# Copied from jacobiscope.models.itrsa.modeling_itrsa._check_puzzles (single-model-file policy)
def _check_puzzles(input_ids: torch.Tensor) -> None:
    """Refuse anything but an ``[N, 81]`` integer tensor of digits 0-9, with a message that names the fix."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be an [N, 81] integer tensor (0 = blank, 1-9 = given), got "
                        f"{type(input_ids).__name__}. Convert puzzle strings with model.loop_inputs(puzzles).")
    if input_ids.dim() != 2 or input_ids.shape[-1] != 81:
        raise ValueError(f"input_ids must be an [N, 81] integer tensor (0 = blank, 1-9 = given), got "
                         f"{tuple(input_ids.shape)}. Reshape it: input_ids.reshape(-1, 81) (one puzzle of 81 "
                         "cells, or [N, 9, 9] boards, become rows of 81).")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must be integers (0-9), got {input_ids.dtype}. Pass digit ids as .long() "
                         "(one-hot boards: jacobiscope.data.sudoku.from_one_hot).")
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) > 9):
        raise ValueError(f"input_ids must hold digits 0-9, got values in [{int(input_ids.min())}, "
                         f"{int(input_ids.max())}]. Use 0 for blanks and 1-9 for givens.")


# Copied from jacobiscope.models.itrsa.modeling_itrsa._MAX_LOOPS
# Longest run solve/forward accept: test-time scaling saturates long before, and a larger count (a typo, 10**9)
# would run for hours instead of failing.
_MAX_LOOPS = 100_000


# Copied from jacobiscope.models.itrsa.modeling_itrsa._count
def _count(name: str, value, limit: int | None, example: str, what: str = "a positive int") -> int:
    """``value`` as an int in ``[1, limit]``. numpy ints and one-element integer tensors pass; bools, floats and
    strings are refused rather than truncated (``int(2.5)``) or read as a digit (``True``)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not (
            value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        value = int(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, got {value!r} ({type(value).__name__}). Pass e.g. {example}.")
    if value < 1:
        raise ValueError(f"{name} must be {what}, got {value!r}. Pass e.g. {example}.")
    if limit is not None and value > limit:
        raise ValueError(f"{name}={value} is more than the {limit} allowed (it would run for hours). Pass a smaller "
                         f"{name}, e.g. {example}.")
    return int(value)


# Copied from jacobiscope.models.itrsa.modeling_itrsa._check_labels
def _check_labels(labels, input_ids: torch.Tensor) -> None:
    """Labels are the solved grids: an integer tensor shaped like ``input_ids`` holding digits 1-9."""
    if not isinstance(labels, torch.Tensor) or labels.shape != input_ids.shape:
        got = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise ValueError(f"labels must be the solutions, an integer tensor shaped like input_ids "
                         f"{tuple(input_ids.shape)}, got {got}. Pass one solved grid (81 digits 1-9) per puzzle.")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer digits 1-9, got {labels.dtype}. Pass them as .long().")
    if labels.numel() and (int(labels.min()) < 1 or int(labels.max()) > 9):
        raise ValueError(f"labels must be solution digits 1-9 (no blanks), got values in [{int(labels.min())}, "
                         f"{int(labels.max())}]. Pass the solved grids, not the puzzles (0 = blank).")


# Copied from jacobiscope.models.itrsa.modeling_itrsa._as_puzzle_tensor
def _as_puzzle_tensor(puzzles) -> torch.Tensor:
    """At least one puzzle as ``[N, 81]`` int64 ids: 81-character strings of the ASCII digits 0-9 (``0`` or ``.``
    for blanks; whitespace is ignored, so a grid of 9 lines or space-separated digits reads the same), 81 ints or
    9 rows of 9 ints per puzzle, or an ``[N, 81]`` integer tensor. Anything else raises ValueError / TypeError
    naming the fix."""
    if isinstance(puzzles, torch.Tensor):
        _check_puzzles(puzzles)
        if puzzles.shape[0] == 0:
            raise ValueError("got 0 puzzles (an empty [0, 81] tensor). Pass at least one puzzle.")
        puzzles = puzzles.long()
        _check_contradictions(puzzles)
        return puzzles
    if isinstance(puzzles, str) or _digit_rows(puzzles) is not None:
        puzzles = [puzzles]  # one puzzle: a string, 81 ints or 9 rows of 9
    if isinstance(puzzles, (bytes, bytearray, set, frozenset, dict)) or not isinstance(puzzles, Iterable):
        fix = ("decode them first (puzzles.decode())" if isinstance(puzzles, (bytes, bytearray)) else
               "put them in a list (a set or dict has no order)" if isinstance(puzzles, (set, frozenset, dict)) else
               "pass one string, a list of strings or a tensor")
        raise TypeError(f"puzzles must be 81-character strings ('0' or '.' for blanks) or an [N, 81] integer "
                        f"tensor, got {type(puzzles).__name__}: {fix}.")
    rows = []
    for index, text in enumerate(puzzles):
        digits = _digit_rows(text)
        if digits is not None:
            text = "".join(map(str, digits))
        elif not isinstance(text, str):
            raise TypeError(f"Puzzle {index} is of type {type(text).__name__}, not a string: puzzles are 81-character "
                            "strings, 81 ints (or 9 rows of 9) each, or one [N, 81] integer tensor.")
        text = "".join(text.split())
        bad = next((i for i, c in enumerate(text) if c not in "0123456789."), None)  # ASCII only: no '٣' or '５'
        if len(text) != 81 or bad is not None:
            where = f", with {text[bad]!r} at position {bad}" if bad is not None else ""
            raise ValueError(
                f"Puzzle {index} must be 81 characters of digits 0-9 ('0' or '.' for blanks); got {len(text)} "
                f"characters starting {text[:12]!r}{where}. Write each puzzle as one row-major string of ASCII digits."
            )
        rows.append([0 if c == "." else ord(c) - 48 for c in text])
    if not rows:
        raise ValueError("got 0 puzzles (an empty list). Pass at least one puzzle.")
    tensor = torch.tensor(rows, dtype=torch.long)
    _check_contradictions(tensor)
    return tensor


# Copied from jacobiscope.models.itrsa.modeling_itrsa._digit_rows
def _digit_rows(puzzle) -> list[int] | None:
    """``puzzle`` as 81 ints when it is a list / tuple of 81 ints 0-9 or of 9 rows of 9 (else None)."""
    if not isinstance(puzzle, (list, tuple)):
        return None
    if len(puzzle) == 9 and all(isinstance(row, (list, tuple)) and len(row) == 9 for row in puzzle):
        puzzle = [value for row in puzzle for value in row]
    if len(puzzle) != 81 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= 9
                                    for v in puzzle):
        return None
    return [int(v) for v in puzzle]


# Copied from jacobiscope.models.itrsa.modeling_itrsa._check_contradictions
def _check_contradictions(input_ids: torch.Tensor) -> None:
    """Refuse puzzles whose givens repeat a digit in a row, column or box (no solution can exist)."""
    one_hot = torch.nn.functional.one_hot(input_ids, 10)[..., 1:].reshape(-1, 9, 9, 9)  # [N, row, col, digit]
    units = {
        "row": one_hot.sum(2),
        "column": one_hot.sum(1),
        "box": one_hot.reshape(-1, 3, 3, 3, 3, 9).sum(dim=(2, 4)).reshape(-1, 9, 9),
    }
    for unit, counts in units.items():
        bad = (counts > 1).nonzero()
        if bad.numel():
            puzzle, index, digit = (int(v) for v in bad[0])
            raise ValueError(f"Puzzle {puzzle} is contradictory: digit {digit + 1} appears twice in {unit} "
                             f"{index + 1}. No solution exists: fix its givens.")


# Copied from jacobiscope.models.itrsa.modeling_itrsa._readouts
def _readouts(logits_of, input_ids: torch.Tensor, loops: int) -> dict:
    """What a loop-depth sweep reads from a state: the digit logits, whether the completed grid is solved (1.0 or
    0.0, the mean over the batch), and the trained loop count."""

    def quality(x):
        digits = logits_of(x).argmax(-1) + 1
        return float(_is_solution(torch.where(input_ids > 0, input_ids, digits)).to(torch.float64).mean())

    return {"readout": logits_of, "quality": quality, "loops": int(loops)}


# Copied from jacobiscope.models.itrsa.modeling_itrsa._is_solution
def _is_solution(grids: torch.Tensor) -> torch.Tensor:
    """``[N]`` bools: every row, column and box of each ``[81]`` grid holds each digit 1-9 exactly once."""
    one_hot = torch.nn.functional.one_hot(grids.long().clamp(0, 9), 10)[..., 1:].reshape(-1, 9, 9, 9)
    rows, columns = one_hot.sum(2), one_hot.sum(1)
    boxes = one_hot.reshape(-1, 3, 3, 3, 3, 9).sum(dim=(2, 4)).reshape(-1, 9, 9)
    return torch.stack([rows, columns, boxes], 1).eq(1).flatten(1).all(1)


# Copied from jacobiscope.models.itrsa.modeling_itrsa._loop_counts
def _loop_counts(loops) -> list[int]:
    """Sorted distinct loop counts, each a positive int."""
    several = isinstance(loops, Iterable) and not isinstance(loops, (str, bytes, torch.Tensor))
    counts = list(loops) if several else [loops]
    if not counts:
        raise ValueError("loops must be positive ints (one or several), got none. Pass e.g. loops=(16, 32).")
    return sorted({_count("loops", count, _MAX_LOOPS, "loops=(16, 32)", "positive ints (one or several)")
                   for count in counts})


# Copied from jacobiscope.models.itrsa.modeling_itrsa._cross_entropy
def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over all 81 cells of every board (labels are digits 1-9)."""
    return F.cross_entropy(logits.reshape(-1, 9), (labels.reshape(-1) - 1).long())


def _loop_body(model: AKOrNForSudoku, x: torch.Tensor, injection: torch.Tensor) -> tuple:
    """One loop of `forward`: ``(y_t, x_{t+1})`` — the drive (for the energies) and the next state."""
    y = model.drive(x, injection)
    return y, model._update(x, y)


# Copied from jacobiscope.models.itrsa.modeling_itrsa._compiled_loop_body
@functools.cache
def _compiled_loop_body():
    """`_loop_body` through `torch.compile`, built once per process. The model is an argument, not captured, so a
    copy of a model can never run with another model's weights; dynamo guards on what it reads."""
    return torch.compile(_loop_body, dynamic=None)
