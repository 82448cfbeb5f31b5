"""`jacobiscope.analyze(model, inputs)`: every requested layer of a Hugging Face model as a looped dynamical
system, measured, with a verdict per layer. `describe` is the dry run.

Plan, shard, measure each: `jacobiscope.adapters.map_source` decides how the model loops and builds each input's
maps (the one place that does), the inputs are sharded across accelerate processes, each map is measured.
"""
from __future__ import annotations

import math
import platform
import time
import warnings

import torch

from .adapters._source import map_source
from .errors import SlowDerivativesWarning
from ._progress import progress_bar
from .diagnostics import measure
from .linalg._reverse_products import uses_reverse_products
from .report import LayerResult, Report
from ._analyze_describe import LayerPlan, describe
from ._analyze_options import check_options, resolve_diagnostics
from ._validation import as_int, clamped_count

__all__ = ["analyze", "describe", "DIAGNOSTICS", "LayerPlan"]

#: The built-in diagnostics a user chooses from (the regime verdict always runs); `jacobiscope.list_diagnostics`
#: lists these and any registered since.
DIAGNOSTICS = ("spectral_norm", "eigenvalues", "lyapunov", "clusters", "energy")


_REVERSE_NOTE = ("derivatives by double backward: the step contains a custom torch.autograd.Function without "
                 "forward-mode support (exact products, slower than forward mode)")


def _versions() -> dict:
    import jacobiscope

    versions = {"jacobiscope": jacobiscope.__version__, "torch": torch.__version__, "python": platform.python_version()}
    try:
        import transformers

        versions["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    return versions


def analyze(
    model,
    inputs,
    tokenizer=None,
    layers: list[int] | int | None = None,
    mode: str | None = None,
    loops: int = 32,
    diagnostics=None,
    k: int = 4,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    *,
    eta: float | None = None,
    eigen_k: int = 4,
    eigen_restarts: int = 4,
    spectral_samples: int = 3,
    seed: int = 0,
    max_length: int | None = 512,
    progress: bool | None = None,
    input_labels: list[str] | None = None,
    recurrence: str | None = None,
) -> Report:
    """Measure each requested layer of ``model`` as a looped map ``X_{t+1} = F(X_t)`` on ``inputs``.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3, 4, 5]]), loops=8, progress=False)
        >>> [row.layer for row in report.rows], report.rows[0].regime in jacobiscope.dynamics.REGIMES
        ([0, 1], True)

    Arguments:
        model: a transformers model (see `looped_block` for the families and the adapter mechanism).
        inputs: a string or list of strings, a tokenized batch (padding is removed per example: each example's
            state is exactly its tokens), token ids, pixel values, or hidden states ``[B, S, hidden]``.
        tokenizer: for text, when the model's folder has none.
        layers: block indices (default: all).
        mode: ``"block"`` (the whole layer), ``"attention"`` (the ItrSA form ``Norm(X + eta Attn(X))``) or
            ``"loop"`` (the model's own recurrence, `jacobiscope.native_loop`: ALBERT, HRM-Text, Dory, Inkling-2
            loop, the reference solvers, or a model following the protocol). Default: ``"loop"`` for a model with a
            recurrence of its own, ``"block"`` otherwise.
        recurrence: which of the model's recurrences in loop mode (`jacobiscope.list_recurrences`; default its
            first).
        loops: how many times each map is applied.
        diagnostics: subset of `DIAGNOSTICS` (default all). State norms and step sizes are always recorded.
        k: number of Lyapunov exponents (tangent vectors).
        dtype: compute dtype (default: the model's; float32 for half-precision models, said in the notes).
        device: run the diagnostics on this device (the block is copied there; the model is not moved).
        eta: attention-mode step size (default 1.0).
        eigen_k: eigenvalues (largest modulus) summarized at the last finite loop (Arnoldi for large states, to
            a relative residual of 1e-3 within ``eigen_restarts`` restarts; the largest residual is recorded in
            ``oscillation["max_residual"]`` and a row is flagged when it exceeds 0.05).
        spectral_samples: loops at which the spectral norm is measured (evenly spaced, first and last included).
        seed: seed of every random start vector and tangent frame.
        max_length: tokenizer truncation for text inputs.
        progress: a progress bar on stderr (a widget in Jupyter) counting rows (input x layer); ``None`` (default)
            shows it once the run has taken 2 s, ``False`` never.
        input_labels: one name per input for the report (default: a snippet of each input).

    Returns:
        A `Report`: one `LayerResult` per (input, layer) with state norms, step sizes, spectral norms,
        eigenvalue summary, Lyapunov spectrum with running estimates, token-cluster order parameters,
        pseudo-energy (attention mode), the regime verdict with its evidence, and flags; plus provenance and notes
        (what was changed on the model, and restored). A layer that diverges is flagged, and the other layers are
        still measured; so is a layer whose entering state is already NaN/Inf (flagged at loop 0, not measured).

    Bad arguments and inputs fail before any measuring, with `ArgumentError`, `InputError` or `AdapterError`
    naming the problem and the fix (a misspelled mask key, token ids outside the vocabulary, an unavailable
    device, ...). A ``DataParallel`` / ``DistributedDataParallel`` wrapper is unwrapped (said in the notes).

    Under ``accelerate launch`` with several processes the examples are sharded across processes and the rows
    gathered on every process (torch.func runs on the unwrapped model).
    """
    diagnostics = resolve_diagnostics(diagnostics)
    check_options(k, eigen_k, spectral_samples, loops, seed, eigen_restarts, dtype, device, input_labels, progress)
    # Plain ints from here on (numpy integers are accepted, and would not serialize into the report).
    sizes = {"loops": as_int(loops), "k": as_int(k), "eigen_k": as_int(eigen_k),
             "spectral_samples": as_int(spectral_samples), "eigen_restarts": as_int(eigen_restarts), "seed": as_int(seed)}
    started = time.perf_counter()
    with map_source(model, inputs, tokenizer=tokenizer, layers=layers, mode=mode, recurrence=recurrence, eta=eta,
                    dtype=dtype, device=device, max_length=max_length, input_labels=input_labels) as source:
        notes = list(source.notes)
        shard, gather = _shard(list(range(len(source))))
        bar = progress_bar(len(shard) * len(source.plan.layers), "jacobiscope analyze", unit="row",
                           enabled=False if progress is False else None)
        rows, used_k = [], []  # used_k: the k each row ran with (clamped to its state size, said in the notes)
        for index in shard:
            item = source[index]
            notes.extend(note for note in item.notes if note not in notes)
            for looped in item.maps:
                rows.append(_measure_map(looped, item, source, diagnostics, sizes, notes, used_k))
                bar.update(1)
        bar.close()
        rows = gather(rows)
        provenance = source.provenance()
    if any(note.startswith(("model switched", "attention implementation switched")) for note in notes):
        notes.append("the model was restored to its original state afterwards")
    rows.sort(key=lambda row: (row.input_index, row.layer))
    k_used = max(used_k) if used_k else sizes["k"]
    report_provenance = _provenance(provenance, rows, source.model, sizes, k_used, diagnostics, dtype, device,
                                    len(source), time.perf_counter() - started)
    if k_used != sizes["k"]:
        report_provenance["k_requested"] = sizes["k"]  # "k" is what ran: the state had fewer entries than asked for
    return Report(rows=rows, provenance=report_provenance, notes=notes)


def _measure_map(looped, item, source, diagnostics, sizes: dict, notes: list, used_k: list) -> LayerResult:
    """One row: the map measured (its sizes clamped to the state, each clamp said), its input's flags, the model's
    own outcome (a reference solver's: solved or not)."""
    loops = sizes["loops"]
    used = _clamped_sizes(looped, loops, sizes["k"], sizes["eigen_k"], sizes["spectral_samples"], notes)
    used_k.append(used[0])
    with warnings.catch_warnings():  # the report's notes say it, once, instead
        warnings.simplefilter("ignore", SlowDerivativesWarning)
        row = _measure(looped, item.index, item.label, source.plan.mode, loops, diagnostics, *used[:2],
                       sizes["eigen_restarts"], used[2], sizes["seed"])
    row.flags.extend(flag for flag in item.flags if flag not in row.flags)
    if uses_reverse_products(looped) and _REVERSE_NOTE not in notes:
        notes.append(_REVERSE_NOTE)
    outcome = getattr(source.model, "loop_outcome", None) if source.plan.own_loop else None
    if callable(outcome):
        row.outcome = dict(outcome(item.inputs["input_ids"], loops)[0])
    return row


def _clamped_sizes(looped, loops: int, k: int, eigen_k: int, spectral_samples: int, notes: list) -> tuple:
    """k, eigen_k and spectral_samples as they can run on this map: at most the state size ``D`` (a D-dimensional
    map has D exponents and D eigenvalues) and the ``loops + 1`` states — each clamp said (a warning and a note),
    never silent."""
    x0 = looped.x0
    size = int((x0[0] if looped.batch_dims == 1 else x0).numel())
    why = f"the state has D={size} entries (a D-dimensional map has D exponents)"
    k = clamped_count(k, size, "k", why, notes=notes, stacklevel=5)
    eigen_k = clamped_count(eigen_k, size, "eigen_k", f"the Jacobian has D={size} eigenvalues", notes=notes,
                            stacklevel=5)
    spectral_samples = clamped_count(spectral_samples, loops + 1, "spectral_samples",
                                     f"the trajectory has {loops + 1} states (loops={loops})", notes=notes,
                                     stacklevel=5)
    return k, eigen_k, spectral_samples


def _provenance(source_provenance, rows, model, sizes: dict, k: int, diagnostics, dtype, device, inputs: int,
                seconds: float) -> dict:
    """How to reproduce the numbers: the model, the adapter (or the model's own loop), the settings, versions."""
    return {
        "model": source_provenance.model,
        "model_class": source_provenance.model_class,
        "adapter": source_provenance.adapter,
        "layers": sorted({row.layer for row in rows}),
        "blocks": source_provenance.blocks,
        "mode": source_provenance.mode,
        "eta": source_provenance.eta,
        "loops": sizes["loops"],
        "k": k,
        "diagnostics": list(diagnostics),
        "dtype": rows[0].dtype if rows else str(dtype),
        "device": str(device or next(model.parameters()).device),
        "seed": sizes["seed"],
        "inputs": inputs,
        "seconds": seconds,
        "versions": _versions(),
    }


def _measure(looped, input_index, label, mode, loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples,
             seed) -> LayerResult:
    _check_trajectory_memory(looped, loops, label)
    if not bool(torch.isfinite(looped.x0).all()):
        # The state entering this layer is already NaN/Inf (an earlier layer overflowed, or Inf weights upstream):
        # the map cannot be measured, but the other layers can — a flagged row instead of an error for all.
        return _unmeasured_row(looped, input_index, label, mode, loops)
    return measure(looped, looped.x0, loops=loops, diagnostics=diagnostics, k=k, eigen_k=eigen_k,
                   eigen_restarts=eigen_restarts, spectral_samples=spectral_samples, seed=seed, label=label,
                   input_index=input_index, mode=mode)


def _unmeasured_row(looped, input_index, label, mode, loops) -> LayerResult:
    """The row of a map whose initial state is not finite: flagged at loop 0, nothing measured."""
    x0 = looped.x0
    layer = looped.info.layer if looped.info.layer is not None else 0
    state = x0[0] if looped.batch_dims == 1 else x0
    bad = int((~torch.isfinite(state)).sum())
    where = "the loop" if mode == "loop" else f"layer {layer}"
    tokens = state.shape[0] if state.dim() >= 2 else 1
    first = float(state.double().norm() / math.sqrt(tokens))
    return LayerResult(
        input_index=input_index, input_label=label, layer=layer, mode=mode, eta=looped.info.eta, loops=loops,
        state_shape=list(state.shape), dtype=str(x0.dtype).replace("torch.", ""),
        state_norm=[first] + [math.nan] * loops, step_size=[math.nan] * loops, spectral_norm=[], eigenvalues=None,
        eigen_loop=None, oscillation=None, lyapunov=None, clusters=None, energy=None, regime="unknown",
        evidence={"reason": f"the state entering {where} is not finite ({bad} NaN/Inf entries)"},
        flags=[f"NaN/Inf at loop 0: the state entering {where} has {bad} non-finite entries (an earlier layer or "
               "the inputs overflowed) — not measured; fix the weights or inputs upstream"],
        seconds=0.0, timings={})


def _check_trajectory_memory(looped, loops: int, label: str) -> None:
    """The diagnostics keep every state of the trajectory: refuse ``loops`` whose states cannot fit in memory
    (``loops=10**9`` would otherwise run for hours and then die in the allocator)."""
    from .maps import check_trajectory_memory

    x0 = looped.x0
    state = x0[0] if looped.batch_dims == 1 else x0
    check_trajectory_memory(state, loops + 1, f"loops={loops} run for {label!r}", "lower loops")


def _shard(indices: list):
    """Split the inputs across accelerate processes (if any); return (my input indices, gather function)."""
    indexed = list(indices)
    try:
        from accelerate import PartialState
    except ImportError:  # pragma: no cover
        return indexed, lambda rows: rows
    # Without CUDA, the processes only find each other (gloo) when asked to run on CPU.
    state = PartialState(cpu=not torch.cuda.is_available())
    if state.num_processes <= 1:
        return indexed, lambda rows: rows
    mine = indexed[state.process_index :: state.num_processes]

    def gather(rows):
        from accelerate.utils import gather_object

        return list(gather_object(rows))

    return mine, gather
