"""ItrSA for Sudoku: the looped self-attention of Tomihari & Karakida (NeurIPS 2025), paper form.

    X_{t+1} = Norm(X_t + eta * (MSA(X_t) + C)),   C = embed(puzzle) + position,   logits = readout(X_T)

Single-model-file policy (as transformers): this file needs only torch, transformers and its configuration, so a
Hub user with ``trust_remote_code`` can load a checkpoint without installing jacobiscope (``loop_map`` alone
imports jacobiscope, lazily).
"""
from __future__ import annotations

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

from .configuration_itrsa import ItrSAConfig

__all__ = ["ItrSAForSudoku", "ItrSASudokuOutput"]


@dataclass
class ItrSASudokuOutput(ModelOutput):
    """``loss`` (cross-entropy over all 81 cells), ``logits [N, 81, 9]``, optionally the per-loop pseudo-energies
    ``energies [N, loops]`` (``-Tr(X_t^T Y_t)`` at the pre-update state) and ``states [loops + 1, N, 81, dim]``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    energies: torch.Tensor | None = None
    states: torch.Tensor | None = None


class _Norm(nn.Module):
    def __init__(self, kind: str, dim: int, eps: float):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(dim)) if kind != "none" else None

    def forward(self, z):
        if self.kind == "rmsnorm":
            return self.weight * z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.kind == "layernorm":
            centered = z - z.mean(-1, keepdim=True)
            return self.weight * centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + self.eps)
        return z


class _LoopedAttention(nn.Module):
    """Multi-head self-attention over the 81 cells, in three parameterizations.

    ``standard``: free W_Q, W_K, W_V, W_O. ``e_single``: one head with ``W_V = sym(W_K W_Q^T)`` — the energy-
    admitting single-head form. ``e_multi``: per head ``W_K^h = W_Q^h`` (symmetric, rank ``head_dim`` QK) and a
    symmetric ``W_V^h``, heads averaged — our reading of the paper's multi-head energy condition.
    """

    def __init__(self, config: ItrSAConfig):
        super().__init__()
        dim, heads = config.hidden_size, config.num_heads
        self.kind = config.attention
        self.attend_self = getattr(config, "attend_self", True)
        self.heads = 1 if self.kind == "e_single" else heads
        self.head_dim = dim // self.heads
        bias = config.attention_bias
        if self.kind == "standard":
            self.query = nn.Linear(dim, dim, bias=bias)
            self.key = nn.Linear(dim, dim, bias=bias)
            self.value = nn.Linear(dim, dim, bias=bias)
            self.output = nn.Linear(dim, dim, bias=bias)
        elif self.kind == "e_single":
            self.query = nn.Linear(dim, dim, bias=False)
            self.key = nn.Linear(dim, dim, bias=False)
        elif self.kind == "e_multi":
            self.query = nn.Linear(dim, dim, bias=False)
            self.value_generator = nn.Parameter(torch.randn(self.heads, dim, dim) / math.sqrt(dim))
        else:
            raise ValueError(f"attention must be 'standard', 'e_single' or 'e_multi', got {self.kind!r}.")

    def _split(self, t):
        n, cells, _ = t.shape
        return t.reshape(n, cells, self.heads, self.head_dim).transpose(1, 2)

    def value_matrix(self) -> torch.Tensor:
        """The effective value map(s): ``[dim, dim]`` (e_single) or ``[heads, dim, dim]`` (e_multi)."""
        if self.kind == "e_single":
            qk = self.key.weight.T @ self.query.weight  # x W_K (x W_Q)^T = x (W_K W_Q^T) x^T in row form
            return 0.5 * (qk + qk.T)
        if self.kind == "e_multi":
            return 0.5 * (self.value_generator + self.value_generator.transpose(1, 2))
        raise AttributeError("value_matrix exists only for the energy-constrained variants")

    def energy_weights(self) -> dict:
        """The maps an energy analysis needs, row convention ``y = x A``: ``query`` and ``key`` ``[dim, dim]``,
        ``value_output`` ``[heads, dim, dim]`` (head h's value map times its slice of the output map; e_multi's
        heads are averaged, hence the 1/heads), and ``heads``."""
        query = self.query.weight.T
        if self.kind == "standard":
            value = self.value.weight.T.reshape(-1, self.heads, self.head_dim).transpose(0, 1)  # [H, d, dh]
            output = self.output.weight.T.reshape(self.heads, self.head_dim, -1)  # [H, dh, d]
            return {"query": query, "key": self.key.weight.T, "value_output": value @ output, "heads": self.heads}
        if self.kind == "e_single":
            return {"query": query, "key": self.key.weight.T, "value_output": self.value_matrix()[None], "heads": 1}
        return {"query": query, "key": query, "value_output": self.value_matrix() / self.heads, "heads": self.heads}

    def _others_only(self, cells: int, device) -> torch.Tensor | None:
        """The mask that keeps a cell from attending to itself (True: may attend), or None when it may."""
        if self.attend_self:
            return None
        return ~torch.eye(cells, dtype=torch.bool, device=device)

    def forward(self, x):
        q = self._split(self.query(x))
        mask = self._others_only(x.shape[-2], x.device)
        if self.kind == "standard":
            # The fused kernel is ~30% faster to train on CPU; jacobiscope's jvps select its math backend.
            mixed = F.scaled_dot_product_attention(q, self._split(self.key(x)), self._split(self.value(x)),
                                                   attn_mask=mask)
            n, _, cells, _ = mixed.shape
            return self.output(mixed.transpose(1, 2).reshape(n, cells, -1))
        k = q if self.kind == "e_multi" else self._split(self.key(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # [N, H, 81, 81]
        if self.kind == "e_single":
            return weights[:, 0] @ (x @ self.value_matrix())
        values = torch.einsum("nd,hde->hne", x.reshape(-1, x.shape[-1]), self.value_matrix())
        values = values.reshape(self.heads, *x.shape).transpose(0, 1)  # [N, H, 81, dim]
        return (weights @ values).mean(1)


class ItrSAForSudoku(PreTrainedModel):
    """Looped self-attention Sudoku solver in the paper's form, as a transformers model.

    Example::

        >>> import torch
        >>> from jacobiscope.models import ItrSAConfig, ItrSAForSudoku
        >>> model = ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2))
        >>> out = model(torch.zeros(3, 81, dtype=torch.long), labels=torch.ones(3, 81, dtype=torch.long))
        >>> tuple(out.logits.shape), out.loss.dim()
        ((3, 81, 9), 0)

    ``forward(input_ids, labels=None, loops=None, return_energies=False, return_states=False)``: ``input_ids``
    ``[N, 81]`` with 0 for blanks and 1-9 for givens; ``labels`` ``[N, 81]`` solution digits 1-9 (cross-entropy over
    all cells, as AKOrN); ``loops`` overrides ``config.loops`` (test-time scaling). `solve` returns completed grids;
    `loop_map` the exact recurrence as a `jacobiscope.LoopedMap`.
    """

    config_class = ItrSAConfig
    base_model_prefix = "itrsa"
    main_input_name = "input_ids"
    _no_split_modules = []
    # What the recurrence applies every loop (the weights a spectral penalty acts on), and the attention inside it
    # (whose query/key/value-output maps the energy penalties read): declared, as transformers models declare
    # _no_split_modules, so that jacobiscope never has to recognise a model by its class name.
    _looped_modules = ["attention", "mlp"]
    _looped_attention = ["attention"]
    # forward takes **kwargs (Trainer passes extras) but its loss is a plain mean: let Trainer scale it under
    # gradient accumulation instead of assuming the model normalizes by num_items_in_batch.
    accepts_loss_kwargs = False
    # True: a training forward (train mode, gradients on) runs each loop through `torch.compile` (see
    # `_compiled_loop_body`); the math is the same, rounding aside. An execution setting, never saved with the weights.
    compile_loop = False

    def __init__(self, config: ItrSAConfig):
        super().__init__(config)
        dim = config.hidden_size
        self.embed = nn.Embedding(10, dim)
        # Row, column and box embeddings: cells that share a Sudoku unit share a component of their position,
        # which attention needs from the first step (a generic 81-slot embedding starts without that structure).
        self.row_embed = nn.Embedding(9, dim)
        self.column_embed = nn.Embedding(9, dim)
        self.box_embed = nn.Embedding(9, dim)

        self.attention = _LoopedAttention(config)
        self.mlp = (nn.Sequential(nn.Linear(dim, config.mlp_ratio * dim), nn.GELU(), nn.Linear(config.mlp_ratio * dim, dim))
                    if config.mlp_ratio else None)
        self.norm = _Norm(config.norm, dim, config.norm_eps)
        self.head_norm = _Norm("layernorm", dim, config.norm_eps)
        self.readout = nn.Linear(dim, 9)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)

    # ------------------------------------------------------------------ the recurrence
    def injection(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``C = embed(digits) + position`` for ``[N, 81]`` puzzles: ``[N, 81, dim]``."""
        _check_puzzles(input_ids)
        return self._injection_of_checked(input_ids)

    def _injection_of_checked(self, input_ids: torch.Tensor) -> torch.Tensor:
        # No check: a loop map validates its puzzles once; re-checking every loop costs host syncs and keeps the
        # Lyapunov engine from tracing the loop (3.4x the forward instead of 2.4x).
        return self.embed(input_ids) + self.position()

    def position(self) -> torch.Tensor:
        """``[81, dim]``: row + column + box embeddings of each cell."""
        cells = torch.arange(81, device=self.embed.weight.device)
        rows, columns, boxes = cells // 9, cells % 9, (cells // 27) * 3 + (cells % 9) // 3
        return self.row_embed(rows) + self.column_embed(columns) + self.box_embed(boxes)

    def initial_state(self, injection: torch.Tensor) -> torch.Tensor:
        return self.norm(injection) if self.config.norm != "none" else injection

    def drive(self, x: torch.Tensor, injection: torch.Tensor) -> torch.Tensor:
        """``Y_t = MSA(X_t) + C`` (``+ MLP(X_t)`` when ``config.mlp_ratio > 0``)."""
        y = self.attention(x) + injection
        return y + self.mlp(x) if self.mlp is not None else y

    def step(self, x: torch.Tensor, injection: torch.Tensor) -> torch.Tensor:
        """One loop: ``Norm(X + eta * (MSA(X) + C))``."""
        return self.norm(x + self.config.eta * self.drive(x, injection))

    def forward(self, input_ids, labels=None, loops: int | None = None, return_energies: bool = False,
                return_states: bool = False, supervise_every: int | None = None, **kwargs) -> ItrSASudokuOutput:
        """``supervise_every=k`` (with labels): the loss is the mean cross-entropy of the readouts after loops
        ``k, 2k, ...`` and after the last loop, so the state must be right early and stay right."""
        loops = self.config.loops if loops is None else _count("loops", loops, _MAX_LOOPS, "loops=16")
        injection = self.injection(input_ids)
        if labels is not None:
            _check_labels(labels, input_ids)
        x = self.initial_state(injection)
        energies, states = [], [x] if return_states else None
        losses = []
        # Only training forwards compile: evaluation copies of the model (new objects every validation) stay eager.
        body = (_compiled_loop_body() if self.compile_loop and self.training and torch.is_grad_enabled()
                else _loop_body)
        for t in range(1, loops + 1):
            y, next_x = body(self, x, injection)
            if return_energies:
                energies.append(-(x * y).sum(dim=(-1, -2)))
            x = next_x
            if return_states:
                states.append(x)
            if labels is not None and supervise_every and t % supervise_every == 0 and t < loops:
                losses.append(_cross_entropy(self.readout(self.head_norm(x)), labels))
        logits = self.readout(self.head_norm(x))
        loss = None
        if labels is not None:
            loss = torch.stack(losses + [_cross_entropy(logits, labels)]).mean()
        return ItrSASudokuOutput(
            loss=loss,
            logits=logits,
            energies=torch.stack(energies, dim=1) if return_energies else None,
            states=torch.stack(states) if return_states else None,
        )

    @torch.no_grad()
    def solve(self, puzzles, loops: int = 16, votes: int = 1, batch_size: int = 500) -> torch.Tensor:
        """Complete puzzles: 81-character strings (``0``/``.`` blanks) or an ``[N, 81]`` int tensor -> ``[N, 81]``.

        Givens are kept as given. ItrSA is deterministic, so ``votes`` must be 1 (AKOrN votes over noise draws).
        ``loops`` and ``batch_size`` are positive ints; bad puzzles or arguments raise ValueError / TypeError.
        """
        if isinstance(votes, bool) or not isinstance(votes, numbers.Integral) or votes != 1:
            raise ValueError(f"ItrSA is deterministic: energy voting needs random initial states (use AKOrN), so votes "
                             f"must be 1, got {votes!r}. Drop the votes argument.")
        loops = _count("loops", loops, _MAX_LOOPS, "loops=16")
        batch_size = _count("batch_size", batch_size, None, "batch_size=500")
        input_ids = _as_puzzle_tensor(puzzles).to(self.device)
        out = []
        for start in range(0, input_ids.shape[0], batch_size):
            chunk = input_ids[start : start + batch_size]
            digits = self(chunk, loops=loops).logits.argmax(-1) + 1
            out.append(torch.where(chunk > 0, chunk, digits))
        return torch.cat(out)

    @torch.no_grad()
    def solve_along(self, puzzles, loops=(16, 32, 64, 128), batch_size: int = 500) -> dict:
        """Complete puzzles at several loop counts from one trajectory each: ``{T: [N, 81]}``, givens kept.

        The same numbers as ``solve(puzzles, loops=T)`` for every ``T``, for the cost of ``max(loops)`` loops rather
        than their sum: the state is read out whenever the run passes a requested ``T``.
        """
        counts = _loop_counts(loops)
        batch_size = _count("batch_size", batch_size, None, "batch_size=500")
        input_ids = _as_puzzle_tensor(puzzles).to(self.device)
        out = {count: [] for count in counts}
        for start in range(0, input_ids.shape[0], batch_size):
            chunk = input_ids[start : start + batch_size]
            injection = self.injection(chunk)
            x, done = self.initial_state(injection), 0
            for count in counts:
                for _ in range(count - done):
                    x = self.step(x, injection)
                done = count
                digits = self.readout(self.head_norm(x)).argmax(-1) + 1
                out[count].append(torch.where(chunk > 0, chunk, digits))
        return {count: torch.cat(parts) if parts else input_ids.clone() for count, parts in out.items()}

    # jacobiscope's public recurrence protocol (plain Python, no import): `jacobiscope.analyze` and
    # `jacobiscope.native_loop` read the loop from it, as for any looped model.
    jacobiscope_recurrences = ("loop",)

    def jacobiscope_recurrence(self, name: str, input_ids) -> dict:
        """The exact recurrence on these puzzles, in jacobiscope's recurrence protocol: one loop as ``step``
        (``batch_dims=1``, state ``[81, dim]``), ``x0`` the initial state, the trained ``loops``, a drive for the
        pseudo-energy, ``eta``, and for the loop-depth sweep the digit logits (``readout``) and whether the grids
        are solved (``quality``)."""
        if name != "loop":
            raise ValueError(f"ItrSAForSudoku has one recurrence, 'loop'; got {name!r}. Pass recurrence='loop'.")
        input_ids = _as_puzzle_tensor(input_ids).to(self.device)
        step = _ItrSALoop(self, input_ids)
        with torch.no_grad():
            x0 = self.initial_state(self.injection(input_ids))
        description = f"itrsa-sudoku loop ({self.config.attention}, {self.config.norm}, eta={self.config.eta})"
        return {"step": step, "x0": x0, "batch_dims": 1, "drive": step.drive, "eta": self.config.eta,
                "description": description,
                **_readouts(lambda x: self.readout(self.head_norm(x)), input_ids, self.config.loops)}

    def loop_map(self, input_ids):
        """The exact recurrence on these puzzles as a `jacobiscope.LoopedMap` (``batch_dims=1``, state
        ``[81, dim]``, ``x0`` the initial state, a drive for the pseudo-energy): a convenience for
        ``jacobiscope.native_loop(model, {"input_ids": input_ids})``."""
        # importlib, not an import statement: transformers scans remote code for imports and would otherwise
        # demand jacobiscope from Hub users who never call loop_map.
        native_loop = importlib.import_module("jacobiscope").native_loop

        input_ids = _as_puzzle_tensor(input_ids)  # the puzzles' own errors, before jacobiscope wraps them
        looped = native_loop(self, {"input_ids": input_ids})
        looped.name, looped.info.model = looped.info.description, "ItrSAForSudoku"
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


class _ItrSALoop(nn.Module):
    """One loop of a model on fixed puzzles, with the model's parameters reachable by functional_call."""

    def __init__(self, model: ItrSAForSudoku, input_ids: torch.Tensor):
        super().__init__()
        self.model = model
        self.register_buffer("input_ids", input_ids, persistent=False)
        self.training = False

    def drive(self, x):
        return self.model.drive(x, self.model._injection_of_checked(self.input_ids))

    def forward(self, x):
        return self.model.step(x, self.model._injection_of_checked(self.input_ids))


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


# Longest run solve/forward accept: test-time scaling saturates long before, and a larger count (a typo, 10**9)
# would run for hours instead of failing.
_MAX_LOOPS = 100_000


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


def _readouts(logits_of, input_ids: torch.Tensor, loops: int) -> dict:
    """What a loop-depth sweep reads from a state: the digit logits, whether the completed grid is solved (1.0 or
    0.0, the mean over the batch), and the trained loop count."""

    def quality(x):
        digits = logits_of(x).argmax(-1) + 1
        return float(_is_solution(torch.where(input_ids > 0, input_ids, digits)).to(torch.float64).mean())

    return {"readout": logits_of, "quality": quality, "loops": int(loops)}


def _is_solution(grids: torch.Tensor) -> torch.Tensor:
    """``[N]`` bools: every row, column and box of each ``[81]`` grid holds each digit 1-9 exactly once."""
    one_hot = torch.nn.functional.one_hot(grids.long().clamp(0, 9), 10)[..., 1:].reshape(-1, 9, 9, 9)
    rows, columns = one_hot.sum(2), one_hot.sum(1)
    boxes = one_hot.reshape(-1, 3, 3, 3, 3, 9).sum(dim=(2, 4)).reshape(-1, 9, 9)
    return torch.stack([rows, columns, boxes], 1).eq(1).flatten(1).all(1)


def _loop_counts(loops) -> list[int]:
    """Sorted distinct loop counts, each a positive int."""
    several = isinstance(loops, Iterable) and not isinstance(loops, (str, bytes, torch.Tensor))
    counts = list(loops) if several else [loops]
    if not counts:
        raise ValueError("loops must be positive ints (one or several), got none. Pass e.g. loops=(16, 32).")
    return sorted({_count("loops", count, _MAX_LOOPS, "loops=(16, 32)", "positive ints (one or several)")
                   for count in counts})


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over all 81 cells of every board (labels are digits 1-9)."""
    return F.cross_entropy(logits.reshape(-1, 9), (labels.reshape(-1) - 1).long())


def _loop_body(model: ItrSAForSudoku, x: torch.Tensor, injection: torch.Tensor) -> tuple:
    """One loop of `forward`: ``(Y_t, X_{t+1})`` — the drive (for the energies) and the next state."""
    y = model.drive(x, injection)
    return y, model.norm(x + model.config.eta * y)


@functools.cache
def _compiled_loop_body():
    """`_loop_body` through `torch.compile`, built once per process. The model is an argument, not captured, so a
    copy of a model can never run with another model's weights; dynamo guards on what it reads."""
    return torch.compile(_loop_body, dynamic=None)
