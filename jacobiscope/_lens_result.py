"""`LoopLens`: what `jacobiscope.loop_lens` (and `jacobiscope.intervene`) return — the readout and the dynamics of
a looped model at every loop, per input and output position.

Example::

    >>> import torch, jacobiscope
    >>> W = torch.tensor([[0.0, 1.2], [-1.2, 0.3]], dtype=torch.float64)
    >>> m = jacobiscope.LoopedMap(lambda x: torch.tanh(x @ W), x0=torch.tensor([[0.5, -0.2]], dtype=torch.float64))
    >>> m.info.readout = lambda x: 3.0 * x        # state -> logits over 2 "tokens"
    >>> lens = jacobiscope.loop_lens(m, loops=6)
    >>> lens.entropy.shape, lens.logits(6).shape, len(lens.to_dataframe())
    (torch.Size([1, 7, 1]), torch.Size([1, 2]), 7)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .errors import ArgumentError

__all__ = ["LoopLens"]


@dataclass
class LoopLens:
    """The loop lens of ``N`` inputs over loops ``t = 0..loops``, ``P`` output positions each (a model's tokens).

    Attributes:
        loops: the last loop read out. configured: the model's configured (trained) depth, or None.
        labels: one per input.
        entropy, kl_final, kl_prev: ``[N, loops + 1, P]``, nats: the readout's entropy, ``KL(p_loops || p_t)``
            and ``KL(p_{t-1} || p_t)`` (NaN at loop 0).
        top_ids, top_probs: ``[N, loops + 1, P, top_k]``: the most likely tokens and their probabilities.
        flip_loop: ``[N, P]``: the last loop at which the argmax changes (0: it never does).
        gate: ``[N, loops + 1, P]``: the exit gate's probability where the map exposes one (else None).
        step_size: ``[N, loops + 1]``: ``||X_{t+1} - X_t|| / ||X_t||``.
        spectral_norm, spectral_radius: ``[N, loops + 1]``: ``||J_t||_2`` and ``|lambda_max(J_t)|`` at ``X_t`` (NaN
            at loops not sampled: ``jacobian_every``).
        expansion_rate: ``[N, loops + 1]``: ``log ||J_t v_t||`` of a unit tangent propagated along the trajectory
            (> 0: the map stretches it at that loop).
        states: per input the states ``[loops + 1, *state]`` (kept: the lens recomputes logits from them, and an
            intervention starts from them). Memory: ``N (loops + 1) x`` the state's size.
        token_ids: ``[N, P]`` the input tokens when they align with the output positions, else None.
        intervention: what `intervene` changed (``{"at_loop", "kind", ...}``), None for a plain lens.
        baseline: the unpatched run's `LoopLens` when `intervene` was asked for it (``baseline=True``).
    """

    loops: int
    configured: int | None
    labels: list
    entropy: torch.Tensor
    kl_final: torch.Tensor
    kl_prev: torch.Tensor
    top_ids: torch.Tensor
    top_probs: torch.Tensor
    flip_loop: torch.Tensor
    step_size: torch.Tensor
    spectral_norm: torch.Tensor
    spectral_radius: torch.Tensor
    expansion_rate: torch.Tensor
    states: list
    gate: torch.Tensor | None = None
    token_ids: torch.Tensor | None = None
    intervention: dict | None = None
    baseline: "LoopLens | None" = None
    flags: list = field(default_factory=list)
    _logits: list | None = field(default=None, repr=False)  # per input [loops + 1, *readout shape], or None
    _readouts: list = field(default_factory=list, repr=False)

    # ------------------------------------------------------------------ reading it

    def _input(self, input: int) -> int:
        if isinstance(input, bool) or not isinstance(input, int) or not -len(self.labels) <= input < len(self.labels):
            raise ArgumentError(f"input must be an int in 0..{len(self.labels) - 1} (the lens holds "
                                f"{len(self.labels)} inputs), got {input!r} — pass e.g. input=0")
        return input % len(self.labels)

    def _loop(self, loop) -> int:
        if isinstance(loop, bool) or not isinstance(loop, int) or not 0 <= loop <= self.loops:
            raise ArgumentError(f"loop must be an int in 0..{self.loops} (the loops the lens read out), got "
                                f"{loop!r} — pass e.g. loop={self.configured if self.configured is not None else 0}, "
                                "or run the lens with more loops")
        return loop

    def logits(self, loop: int, input: int | None = None) -> torch.Tensor:
        """The readout's logits at ``loop``, as the readout gives them (a model's ``[1, T, V]``); ``input=None``:
        every input's, concatenated along the first axis (``[N, T, V]``, like the model's own batch). Kept from
        the run (``keep_logits=True``) or recomputed from the stored state through the readout."""
        loop = self._loop(loop)
        chosen = range(len(self.labels)) if input is None else [self._input(input)]
        values = []
        for i in chosen:
            if self._logits is not None:
                values.append(self._logits[i][loop])
            else:
                with torch.no_grad():
                    values.append(self._readouts[i](self.states[i][loop]).detach())
        return values[0] if len(values) == 1 else torch.cat(values, dim=0)

    def state(self, loop: int, input: int = 0) -> torch.Tensor:
        """The state ``X_loop`` of an input (after the intervention, in an intervened lens)."""
        return self.states[self._input(input)][self._loop(loop)]

    def expansive_loop(self, input: int = 0, window: int = 3) -> int | None:
        """The first loop from which a perturbation carried along the trajectory grows: its one-step expansion rate
        and the mean rate over it and the next ``window - 1`` loops are above 0 (None: it never does). Smoothed so that one
        stretching step inside a contracting run does not count (`jacobiscope.diagnostics._loop_lens.first_expansive`)."""
        from .diagnostics._loop_lens import first_expansive

        return first_expansive([float(r) for r in self.expansion_rate[self._input(input)]], window)

    def answer_flip_loop(self, input: int = 0) -> int:
        """The last loop at which any position's argmax changes (0: the answer never changes)."""
        return int(self.flip_loop[self._input(input)].max())

    def summary(self) -> list[dict]:
        """One dict per input: label, flip loop, expansive loop, KL to the last loop at the configured depth, the
        largest measured ``||J||_2``."""
        out = []
        for i, label in enumerate(self.labels):
            norms = self.spectral_norm[i][torch.isfinite(self.spectral_norm[i])]
            at = self.configured if self.configured is not None and self.configured <= self.loops else self.loops
            out.append({"label": label, "flip_loop": self.answer_flip_loop(i), "expansive_loop": self.expansive_loop(i),
                        "kl_final_at_configured": float(self.kl_final[i, at].mean()),
                        "max_spectral_norm": float(norms.max()) if norms.numel() else math.nan})
        return out

    def to_dataframe(self):
        """One row per (input, token, loop): ``input_index``, ``label``, ``token``, ``token_id``, ``loop``,
        ``entropy``, ``kl_final``, ``kl_prev``, ``top{i}_id`` / ``top{i}_prob``, ``flip_loop``, ``gate``,
        ``step_size``, ``spectral_norm``, ``spectral_radius``, ``expansion_rate`` (the per-loop dynamics repeated
        on each token of that loop). Needs pandas."""
        import pandas as pd

        n, count, positions = self.entropy.shape
        k = self.top_ids.shape[-1]
        grid = torch.stack(torch.meshgrid(torch.arange(n), torch.arange(positions), torch.arange(count),
                                          indexing="ij"), -1).reshape(-1, 3)
        i, p, t = grid[:, 0], grid[:, 1], grid[:, 2]
        columns = {"input_index": i.numpy(), "label": [self.labels[int(a)] for a in i],
                   "token": p.numpy(), "token_id": (self.token_ids[i, p].numpy() if self.token_ids is not None
                                                    else [None] * len(i)), "loop": t.numpy()}
        for name in ("entropy", "kl_final", "kl_prev"):
            columns[name] = getattr(self, name)[i, t, p].double().numpy()
        for j in range(k):
            columns[f"top{j + 1}_id"] = self.top_ids[i, t, p, j].numpy()
            columns[f"top{j + 1}_prob"] = self.top_probs[i, t, p, j].double().numpy()
        columns["flip_loop"] = self.flip_loop[i, p].numpy()
        columns["gate"] = (self.gate[i, t, p].double().numpy() if self.gate is not None
                           else [math.nan] * len(i))
        for name in ("step_size", "spectral_norm", "spectral_radius", "expansion_rate"):
            columns[name] = getattr(self, name)[i, t].double().numpy()
        return pd.DataFrame(columns)

    # ------------------------------------------------------------------ the figure

    def plot(self, input: int = 0, path=None, *, title: str | None = None):
        """The paper figure of one input: top, what the model says (KL to the last loop per position, their mean
        bold, the loop where the answer last flips dashed); bottom, what its dynamics do (``||J_t||_2``, the
        tangent's one-step growth ``exp(rate)``, the 1 line, the first loop where the map is expansive). Both
        panels share the loop axis; the configured depth is dotted. ``path``: also saved there (PNG/SVG/PDF by
        suffix, `jacobiscope._figures.save_figure`). Returns the matplotlib Figure."""
        from ._figures import new_figure, save_figure

        i = self._input(input)
        figure = new_figure(7.0, 6.0)
        said, done = figure.subplots(2, 1, sharex=True)
        loops = list(range(self.loops + 1))
        kl = self.kl_final[i].double()
        for p in range(kl.shape[1]):
            said.plot(loops, kl[:, p].tolist(), color="tab:blue", lw=0.6, alpha=0.35)
        said.plot(loops, kl.mean(1).tolist(), color="tab:blue", lw=2, label="mean over tokens")
        flip = self.answer_flip_loop(i)
        said.axvline(flip, color="tab:red", ls="--", lw=1.2, label=f"answer last flips at loop {flip}")
        said.set_ylabel("KL(p_last || p_t) (nats)")
        said.set_title(title or f"loop lens: {self.labels[i]}")
        growth = [math.exp(r) if math.isfinite(r) else math.nan for r in self.expansion_rate[i].tolist()]
        done.plot(loops, growth, color="tab:green", lw=1.5, label="tangent growth exp(rate)")
        for values, style, color, label in ((self.spectral_norm[i], "o-", "tab:purple", "||J_t||_2"),
                                            (self.spectral_radius[i], "s--", "tab:orange", "spectral radius")):
            sampled = [t for t in loops if math.isfinite(float(values[t]))]  # jacobian_every: a line through them
            if sampled:
                done.plot(sampled, [float(values[t]) for t in sampled], style, color=color, ms=3, lw=0.8, label=label)
        done.axhline(1.0, color="0.4", ls=":", lw=1)
        expansive = self.expansive_loop(i)
        if expansive is not None:
            done.axvline(expansive, color="tab:red", ls="-.", lw=1.2, label=f"expansive from loop {expansive} (3-loop mean rate > 0)")
        done.set_yscale("log")
        done.set_xlabel("loop t")
        done.set_ylabel("stretch per loop")
        for ax in (said, done):
            if self.configured is not None and self.configured <= self.loops:
                ax.axvline(self.configured, color="0.6", ls=":", lw=1)
            ax.legend(fontsize="x-small")
        if path is not None:
            save_figure(figure, path)
        return figure
