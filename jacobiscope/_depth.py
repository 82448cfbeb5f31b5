"""`depth_dynamics`: a non-looped model's forward pass across its layers as a non-autonomous map.

Example::

    >>> import torch, transformers, jacobiscope
    >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=20))
    >>> (depth,) = jacobiscope.depth_dynamics(model.eval(), torch.tensor([[1, 2, 3]]), k=2)
    >>> len(depth.layers), len(depth.exponents), len(depth.token_gain)
    (3, 2, 3)

Layer ``l`` maps the hidden state entering it to the one leaving it, ``X_{l+1} = F_l(X_l)`` (block mode, with the
arguments the model gave it). Its local expansion is ``||J_l||_2`` at ``X_l``; the finite-time Lyapunov spectrum of
the whole stack comes from ``k`` tangent vectors pushed through ``J_L ... J_1`` with a QR step after each layer
(``log |R_ii|`` per layer, averaged over the layers); the per-token gain is ``||J_L ... J_1 v||`` for a random unit
direction ``v`` on one input token — how far a nudge to that token travels. The paper's stated limitation
(non-looped transformers) measured with the same engine.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from .errors import ArgumentError, NonFiniteWarning
from ._validation import clamped_count, floating_dtype, nonnegative_int, positive_int, seed_int, within_budget

__all__ = ["DepthDynamics", "DepthResults", "depth_dynamics"]


@dataclass
class DepthDynamics:
    """One input's depth dynamics.

    Attributes:
        label: the input.
        layers: per layer ``{"layer", "spectral_norm", "log_stretch": [k]}`` (``log |R_ii|`` of that layer's QR
            step: how much the layer stretched the i-th tangent direction, in nats).
        exponents: the finite-time exponents of the stack, nats per layer (sum of ``log_stretch`` / layers).
        token_gain: the root-mean-square gain through the stack of a unit direction on token ``i``,
            ``sqrt(E ||J_L ... J_1 v||^2)`` over unit ``v`` on that token = ``||J[:, i]||_F / sqrt(d)`` (the first
            ``token_limit`` tokens), estimated from ``token_samples`` reverse chains.
    """

    label: str
    layers: list = field(default_factory=list)
    exponents: list = field(default_factory=list)
    token_gain: list = field(default_factory=list)
    #: what a reader must know before trusting the numbers: a non-finite norm or exponent (which layer), a text
    #: truncated to max_length, k clamped to the state size. Empty when every number is a measurement.
    flags: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"label": self.label, "layers": self.layers, "exponents": self.exponents, "token_gain": self.token_gain,
                "flags": list(self.flags)}

    def to_dataframe(self):
        """This input's layers as a pandas DataFrame: one row per layer (see `DepthResults.to_dataframe`)."""
        return DepthResults([self]).to_dataframe()


class DepthResults(list):
    """What `depth_dynamics` returns: a list of `DepthDynamics` (one per input) that also gives DataFrames.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=20))
        >>> results = jacobiscope.depth_dynamics(model.eval(), torch.tensor([[1, 2, 3]]), k=2)
        >>> results.to_dataframe().columns.tolist()
        ['input_index', 'label', 'layer', 'spectral_norm', 'log_stretch_0', 'log_stretch_1']
        >>> results.exponents_dataframe().shape, results.token_gain_dataframe().shape
        ((1, 5), (3, 4))

    Still a plain list (indexing, iteration, ``len``, ``==`` with a list, unpacking ``(depth,) = ...``), so code
    written for the list keeps working. Every DataFrame needs pandas, imported only when called.
    """

    def to_dataframe(self):
        """One row per (input, layer): ``input_index``, ``label``, ``layer``, ``spectral_norm`` (``||J_l||_2``)
        and ``log_stretch_i`` (``log |R_ii|`` of the layer's QR step, nats)."""
        records = []
        for index, depth in enumerate(self):
            for entry in depth.layers:
                record = {"input_index": index, "label": depth.label, "layer": entry["layer"],
                          "spectral_norm": entry["spectral_norm"]}
                record.update({f"log_stretch_{i}": value for i, value in enumerate(entry["log_stretch"])})
                records.append(record)
        return _frame(records, ["input_index", "label", "layer", "spectral_norm"])

    def exponents_dataframe(self):
        """One row per input: ``input_index``, ``label``, ``exponent_i`` (nats per layer) and ``flags`` (joined)."""
        records = [{"input_index": index, "label": depth.label,
                    **{f"exponent_{i}": value for i, value in enumerate(depth.exponents)},
                    "flags": "; ".join(depth.flags)} for index, depth in enumerate(self)]
        return _frame(records, ["input_index", "label"])

    def token_gain_dataframe(self):
        """One row per (input, token): ``input_index``, ``label``, ``token``, ``gain`` (RMS ``||J_L ... J_1 v||``)."""
        records = [{"input_index": index, "label": depth.label, "token": token, "gain": gain}
                   for index, depth in enumerate(self) for token, gain in enumerate(depth.token_gain)]
        return _frame(records, ["input_index", "label", "token", "gain"])


def _frame(records: list, columns: list):
    """A DataFrame of ``records`` with ``columns`` first (present even with no records), then the others in order."""
    try:
        import pandas
    except ImportError:
        raise ImportError("depth_dynamics(...).to_dataframe needs pandas, which is not installed: pip install "
                          "pandas") from None
    columns = list(columns)
    for record in records:
        columns += [key for key in record if key not in columns]
    return pandas.DataFrame(records, columns=columns)


def depth_dynamics(model, inputs, *, k: int = 4, tokenizer=None, max_length: int | None = 512, seed: int = 0,
                   dtype: torch.dtype | None = None, token_limit: int = 64, token_samples: int = 8) -> DepthResults:
    """Measure the forward pass of ``model`` across its layers on each input; one `DepthDynamics` per input, in a
    `DepthResults` list (``.to_dataframe()``: one row per input and layer).

    Arguments:
        model, inputs, tokenizer, max_length: as for `jacobiscope.analyze`.
        k: tangent vectors for the finite-time Lyapunov spectrum (at most the state size).
        seed: of the random tangent frame and token directions, and of the model's forward where it draws random
            numbers (ViT-MAE's masking).
        dtype: compute dtype (float64 for reference numbers).
        token_limit: per-token gains for at most this many tokens (the first ones; 0: none).
        token_samples: random probes behind the token gains: each is one chain of vjps through the stack and
            scores every token at once (relative error of a gain about ``1 / sqrt(2 * token_samples * r)``, r the
            effective rank of the token's Jacobian block; more samples, less noise).
    """
    from .adapters._source import map_source

    # Every option before the model runs (a bad one used to surface after the forward, or never: token_limit=-1
    # gave no gains without a word).
    k = within_budget(k, "k", unit="tangent vectors")
    seed = seed_int(seed)
    floating_dtype(dtype, "dtype")
    token_limit = nonnegative_int(token_limit, "token_limit")
    token_samples = within_budget(token_samples, "token_samples", "spectral_samples", unit="probes")
    if max_length is not None:
        max_length = positive_int(max_length, "max_length")
    if tokenizer is not None and not callable(tokenizer):
        raise ArgumentError(f"tokenizer must be a tokenizer object, got {type(tokenizer).__name__} {tokenizer!r:.60} "
                            "— pass AutoTokenizer.from_pretrained(<the model's folder>), or None for the model's own")
    results = DepthResults()
    # Every block in block mode: a model without blocks is named before any input is prepared.
    with map_source(model, inputs, tokenizer=tokenizer, mode="block", dtype=dtype, max_length=max_length,
                    seed=seed) as source:
        for item in source:
            depth = _measure_depth(item.maps, str(item.label), k, seed, token_limit, token_samples)
            depth.flags[:0] = list(item.flags)
            results.append(depth)
    return results


def _measure_depth(maps, label: str, k: int, seed: int, token_limit: int, token_samples: int) -> DepthDynamics:
    x = maps[0].x0
    flags = []
    count = clamped_count(k, x[0].numel(), "k", f"the state has D={x[0].numel()} entries", notes=flags, stacklevel=4)
    generator = torch.Generator().manual_seed(seed)
    frame, _ = torch.linalg.qr(torch.randn(x[0].numel(), count, generator=generator, dtype=torch.float64))
    frame = frame.T.to(x.dtype).reshape(count, *x.shape)
    layers, total = [], torch.zeros(count, dtype=torch.float64)
    for looped in maps:
        state = looped.x0
        layer = int(looped.info.layer if looped.info.layer is not None else len(layers))
        if not bool(torch.isfinite(state).all()):
            # An earlier layer overflowed: this one cannot be measured, nor the chain through it (NaN, flagged).
            bad = int((~torch.isfinite(state)).sum())
            flags.append(f"the state entering layer {layer} is not finite ({bad} NaN/Inf entries): an earlier layer "
                         "overflowed — its numbers and the exponents are NaN; compute in float64 "
                         "(dtype=torch.float64) or check the weights")
            layers.append({"layer": layer, "spectral_norm": math.nan, "log_stretch": [math.nan] * count})
            total += math.nan
            continue
        operator = _operator(looped, state)
        with torch.no_grad():  # jvps need no graph for the weights
            pushed = operator.matmat(frame).reshape(count, -1)
        q, r = torch.linalg.qr(pushed.T.to(torch.float64))
        # log 0 = -inf where the layer annihilates a tangent exactly (an exact exponent, as in lyapunov_spectrum);
        # the sign of a zero R_ii is taken as +1, so Householder's completed column carries on instead of a zero one
        stretch = r.diagonal().abs().log()
        total += stretch
        frame = (q * torch.where(r.diagonal() < 0, -1.0, 1.0)).T.to(x.dtype).reshape(count, *state.shape)
        if not bool(torch.isfinite(frame).all()):
            frame = torch.nan_to_num(frame, nan=0.0, posinf=0.0, neginf=0.0)  # the NaN is in total, flagged
        sigma = _layer_spectral_norm(looped, state, operator, seed)
        layers.append({"layer": layer, "spectral_norm": sigma, "log_stretch": stretch.tolist()})
    finite_chain = all(bool(torch.isfinite(looped.x0).all()) for looped in maps)
    gains = _token_gains(maps, generator, token_limit, token_samples) if token_limit and finite_chain else (
        [math.nan] * min(x.shape[1], token_limit) if token_limit and x.dim() >= 3 else [])
    exponents = (total / len(maps)).tolist()
    flags += _nonfinite_flags(layers, exponents, gains)
    return DepthDynamics(label=label, layers=layers, exponents=exponents, token_gain=gains, flags=flags)


def _not_a_measurement(value: float) -> bool:
    """NaN or +inf: an overflow. -inf is a measurement: a layer whose Jacobian annihilates a tangent exactly."""
    return math.isnan(value) or value == math.inf


def _nonfinite_flags(layers: list, exponents: list, gains: list) -> list[str]:
    """One flag per kind of non-finite number, naming where: a NaN/Inf is not a measurement, and a reader of the
    numbers alone would take ``inf`` for "very expanding"."""
    flags = []
    norms = [entry["layer"] for entry in layers if not math.isfinite(entry["spectral_norm"])]
    if norms:
        flags.append(f"spectral_norm NaN/Inf at layer(s) {norms} — not a measurement: the layer overflowed; compute "
                     "in float64 (dtype=torch.float64) or check the weights")
    stretched = [entry["layer"] for entry in layers if any(_not_a_measurement(v) for v in entry["log_stretch"])]
    if stretched:
        flags.append(f"log_stretch NaN/Inf at layer(s) {stretched} — the tangent frame overflowed there; "
                     "compute in float64 (dtype=torch.float64) or check the weights")
    bad = [index for index, value in enumerate(exponents) if _not_a_measurement(value)]
    if bad:
        flags.append(f"exponents NaN/Inf at index(es) {bad} — not measurements (see the layer flags); compute in "
                     "float64 (dtype=torch.float64)")
    if any(not math.isfinite(value) for value in gains):
        flags.append("token_gain NaN at token(s) "
                     f"{[i for i, value in enumerate(gains) if not math.isfinite(value)]} — the chain of Jacobians "
                     "overflowed; compute in float64 (dtype=torch.float64)")
    return flags


def _operator(looped, state):
    """J of one layer at its state, its products from a recorded graph split at the state: a layer takes k + ~12 +
    token_samples products there (the frame, the spectral norm, the token gains), ~1.2 forwards each instead of ~5."""
    from .linalg.operators import JacobianOperator

    return JacobianOperator(looped.detached(), state, linearize=True, owner=looped.module)


def _layer_spectral_norm(looped, state, operator, seed: int) -> float:
    """``||J_l||_2`` to 1e-3 by Lanczos on the layer's operator (shared with the frame's products: one recording,
    one vjp linearization per layer); a NaN Jacobian gives NaN, flagged by the caller with its layer."""
    from .linalg.svd import _spectral_norm

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", NonFiniteWarning)
        result = _spectral_norm(operator.map, state, "lanczos", 1e-3, 200, seed, None, operator=operator)
    return float(result.value.reshape(-1)[0])


def _token_gains(maps, generator, token_limit: int, samples: int) -> list[float]:
    """The root-mean-square gain of a unit direction on each token through the stack, ``||J[:, token]||_F /
    sqrt(d)`` (``J = J_L ... J_1``, d the hidden size), from ``samples`` reverse chains: for Gaussian ``u``,
    ``E ||(J^T u)[token]||^2 = ||J[:, token]||_F^2``, so one chain of vjps scores every token at once — a forward
    chain per token would cost ``token_limit`` times more."""
    x = maps[0].x0
    if x.dim() < 3:
        return []
    tokens = min(x.shape[1], token_limit)
    probes = torch.randn(samples, *maps[-1].x0.shape, generator=generator, dtype=torch.float64).to(x.dtype)
    for looped in reversed(maps):
        with torch.no_grad():
            probes = _operator(looped, looped.x0).rmatmat(probes)
    per_token = probes.to(torch.float64).pow(2).sum(dim=-1).mean(dim=0)   # [batch, tokens]: E ||(J^T u)_token||^2
    gains = (per_token.reshape(-1, x.shape[1])[0, :tokens] / x.shape[-1]).sqrt()
    return [float(v) if math.isfinite(float(v)) else math.nan for v in gains]
