"""`jacobiscope.analyze(model, inputs)`: every requested layer of a Hugging Face model as a looped dynamical
system, measured, with a verdict per layer. `describe` is the dry run."""
from __future__ import annotations

import math
import numbers
import operator
import platform
import time
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from .adapters.inputs import prepare_inputs
from .adapters.looped import block_index, build_maps, prepare_model, unwrap_model
from .adapters.spec import find_blocks
from .errors import ArgumentError, SlowDerivativesWarning
from ._progress import progress_bar
from ._resources import public_name
from .diagnostics import measure
from .diagnostics._base import resolve
from .linalg._reverse_products import uses_reverse_products
from .report import LayerResult, Report
from ._validation import as_int, clamped_count, nonnegative_int, within_budget

__all__ = ["analyze", "describe", "DIAGNOSTICS", "LayerPlan"]

#: The built-in diagnostics a user chooses from (the regime verdict always runs); `jacobiscope.list_diagnostics`
#: lists these and any registered since.
DIAGNOSTICS = ("spectral_norm", "eigenvalues", "lyapunov", "clusters", "energy")


_REVERSE_NOTE = ("derivatives by double backward: the step contains a custom torch.autograd.Function without "
                 "forward-mode support (exact products, slower than forward mode)")


def _has_native_loop(model) -> bool:
    return callable(getattr(model, "loop_map", None))


def _native_examples(model, inputs):
    """One example per input for a model with its own ``loop_map``: a tensor is split along its first dimension;
    anything else goes through the model's ``loop_inputs`` (the reference solvers turn puzzle strings into ids)."""
    from .adapters.inputs import InputError, ModelInputs

    if isinstance(inputs, dict) and isinstance(inputs.get("input_ids"), torch.Tensor):
        inputs = inputs["input_ids"]  # a batch as a training loop holds it: the loop_map takes its ids
    if isinstance(inputs, torch.Tensor):
        tensor = inputs if inputs.dim() >= 2 else inputs.unsqueeze(0)
        labels = [f"input[{i}]" for i in range(tensor.shape[0])]
    elif callable(getattr(model, "loop_inputs", None)):
        items = [inputs] if isinstance(inputs, str) else list(inputs)
        if not items:
            raise InputError(f"No inputs given to {type(model).__name__} — pass at least one")
        try:
            tensor = model.loop_inputs(items)
        except (ValueError, TypeError, KeyError) as error:  # the model's own words (a malformed puzzle, ...)
            raise InputError(f"{type(model).__name__}.loop_inputs rejected the inputs: "
                             f"{(str(error).strip().splitlines() or [type(error).__name__])[0]}") from None
        labels = [(str(item)[:20] + "...") if len(str(item)) > 20 else str(item) for item in items]
    else:
        raise InputError(f"{type(model).__name__} runs its own loop on tensors: pass its loop_map inputs as a tensor "
                         f"[N, ...], got {type(inputs).__name__} — or give the model a loop_inputs(inputs) method")
    if tensor.shape[0] == 0:
        raise InputError("The input tensor is empty — pass at least one example.")
    return [ModelInputs({"input_ids": tensor[i : i + 1]}, [labels[i]]) for i in range(tensor.shape[0])]


def _native_map(model, example, dtype):
    looped = model.loop_map(example.kwargs["input_ids"])
    looped.meta.setdefault("layer", 0)
    return looped.to(dtype=dtype) if dtype is not None else looped


def _resolve_diagnostics(diagnostics) -> tuple[str, ...]:
    """The registered diagnostics to run (names, in registry order; requirements and the verdict included)."""
    if diagnostics is not None and not isinstance(diagnostics, str):
        try:
            diagnostics = list(diagnostics)
        except TypeError:
            raise ArgumentError(f"diagnostics must be a list of names, got {type(diagnostics).__name__} "
                                f"{diagnostics!r} — pass e.g. ['lyapunov'], or None for all") from None
        if not diagnostics:
            # An empty subset would measure nothing but the state norms: a silently empty report.
            raise ArgumentError("diagnostics is empty — pass None for the default set, or names such as ['lyapunov']")
        bad = [name for name in diagnostics if not isinstance(name, str)]
        if bad:
            raise ArgumentError(f"diagnostics must be names (str), got {bad[0]!r} — pass e.g. ['lyapunov']")
    return tuple(diagnostic.name for diagnostic in resolve(diagnostics))


_MODES = ("block", "attention", "loop")


@dataclass
class _Setup:
    """What `analyze` and `describe` agree on before touching the inputs: the (unwrapped) model, the mode and
    how it loops, the notes so far."""

    model: nn.Module
    mode: str
    native: bool
    recurrences: list
    notes: list

    @property
    def recurrent(self) -> bool:
        return self.mode == "loop" and not self.native


def _setup(model, mode, layers, recurrence, eta=None) -> _Setup:
    """Check the arguments that decide what is measured (one wording for analyze and describe); unwrap a
    DataParallel-style wrapper."""
    from .adapters.native import list_recurrences

    model, unwrapped = unwrap_model(model)
    if not isinstance(model, nn.Module):
        loaded = f"transformers.AutoModel.from_pretrained({model!r})" if isinstance(model, str) else "the model object"
        raise ArgumentError(f"model must be a torch nn.Module (a transformers model), got {type(model).__name__} — "
                            f"pass {loaded}")
    native = _has_native_loop(model)
    recurrences = list_recurrences(model) if not native else []
    if mode is not None and (not isinstance(mode, str) or mode not in _MODES):
        from ._validation import did_you_mean

        hint = did_you_mean(mode, _MODES) if isinstance(mode, str) else ""
        raise ArgumentError(f"mode must be 'block', 'attention' or 'loop', got {mode!r}{hint} — pass one of them (or "
                            "None)")
    if mode is None:
        mode = "loop" if (native or recurrences) else "block"
    if mode == "loop" and not (native or recurrences):
        raise ArgumentError(f"mode='loop' needs a model with a recurrence of its own; {type(model).__name__} has "
                            "none — use mode='block' or 'attention' (or give it the jacobiscope_recurrence protocol)")
    if native and mode != "loop":
        raise ArgumentError(f"{type(model).__name__} is measured through its own loop_map (one looped block): "
                            f"mode={mode!r} does not apply — pass mode='loop' or leave it None")
    if recurrence is not None:
        if not isinstance(recurrence, str):
            raise ArgumentError(f"recurrence must be a name (str), got {recurrence!r} — choose from "
                                f"{list_recurrences(model) or 'none'}")
        if native and recurrence != "loop":
            raise ArgumentError(f"{type(model).__name__} has one recurrence, its loop_map ('loop'): recurrence="
                                f"{recurrence!r} does not exist — drop recurrence")
        if mode == "loop" and not native and recurrence not in recurrences:
            # Named now, before the inputs are prepared or the model runs: a typo gets its closest name.
            from ._validation import did_you_mean
            from .adapters.spec import AdapterError

            raise AdapterError(f"{type(model).__name__} has no recurrence {recurrence!r}"
                               f"{did_you_mean(recurrence, recurrences)} — it offers {', '.join(recurrences)} (pass "
                               "one of them, or recurrence=None for the first)")
        if mode != "loop" and not native:
            offered = ", ".join(recurrences) if recurrences else "none"
            raise ArgumentError(f"recurrence={recurrence!r} chooses a looped model's recurrence in mode='loop', but "
                                f"this run is mode={mode!r} on {type(model).__name__} (recurrences: {offered}) — drop "
                                "recurrence" + (" or pass mode='loop'" if recurrences else ""))
    if mode == "loop" and layers is not None and not all(_is_index(i) and operator.index(i) == 0
                                                         for i in _as_list(layers) or [None]):
        raise ArgumentError(f"layers={layers!r} selects blocks, but mode='loop' measures {type(model).__name__}'s own "
                            "loop as one map (layer 0) — drop layers" + ("" if native else
                                                                         ", or pass mode='block' to measure blocks"))
    if eta is not None:
        if mode != "attention":
            raise ArgumentError(f"eta is the step size of mode='attention'; mode={mode!r} would ignore eta={eta!r} — "
                                "drop eta or pass mode='attention'")
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not math.isfinite(eta) or eta <= 0:
            raise ArgumentError(f"eta must be a finite number > 0, got {eta!r} — pass e.g. eta=0.5 (default 1.0)")
    return _Setup(model, mode, native, recurrences, [unwrapped] if unwrapped else [])


def _as_list(layers):
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__") or _is_index(layers):
        return [layers]
    return list(layers)


def _is_index(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_floating_point() and value.dtype != torch.bool
    try:
        operator.index(value)  # int, numpy integers
    except TypeError:
        return False
    return True


def _check_options(k, eigen_k, spectral_samples, loops, seed=0, eigen_restarts=0, dtype=None, device=None,
                   input_labels=None, progress=None):
    """The numeric settings, before any forward: a wrong one fails now, not after minutes of measuring."""
    # Each size a user controls against its budget (`jacobiscope._validation.BUDGETS`): loops=10**9 is refused
    # here, before the model runs, not after hours of looping.
    within_budget(loops, "loops", state_bytes=4)  # the state size is not known yet: one float32 value per state
    within_budget(k, "k", unit="tangent vectors")
    within_budget(eigen_k, "eigen_k", unit="eigenvalues")
    within_budget(spectral_samples, "spectral_samples", unit="samples")
    nonnegative_int(eigen_restarts, "eigen_restarts")
    if eigen_restarts > 10_000:
        raise ArgumentError(f"eigen_restarts={eigen_restarts} is over the budget of 10000 Arnoldi restarts (each "
                            "one a basis of jvps) — pass e.g. eigen_restarts=4 (the default)")
    nonnegative_int(seed, "seed")
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ArgumentError(f"dtype must be a floating torch dtype, got {dtype!r} — pass torch.float32 or "
                            "torch.float64 (or None for the model's own)")
    if device is not None:
        _check_device(device)
    if progress is not None and not isinstance(progress, bool):
        # progress="no" is truthy: the bar would show for the very call that asked for none
        raise ArgumentError(f"progress must be None (a bar after 2 s), True or False, got {progress!r} — pass "
                            "progress=False for no bar")
    if input_labels is not None and (isinstance(input_labels, str) or not hasattr(input_labels, "__len__")):
        raise ArgumentError(f"input_labels must be a list of names (one per input), got {type(input_labels).__name__} "
                            f"{input_labels!r:.40} — pass e.g. [{input_labels!r:.40}]")


def _check_device(device) -> None:
    """``device`` names a device this machine has (``"cuda"`` without CUDA fails here, not inside torch)."""
    if not isinstance(device, (str, torch.device)):
        raise ArgumentError(f"device must be a str or torch.device, got {type(device).__name__} {device!r} — pass "
                            "e.g. 'cpu' or 'cuda:0'")
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ArgumentError(f"device={device!r} is not a device name ({str(error).splitlines()[0]}) — pass e.g. "
                            "'cpu' or 'cuda:0'") from None
    if parsed.type == "meta":
        raise ArgumentError("device='meta' holds no numbers, so nothing can be measured on it — pass 'cpu' or 'cuda'")
    try:
        torch.empty(1, device=parsed)
    except (RuntimeError, AssertionError) as error:  # torch says "not compiled with CUDA" with an AssertionError
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        raise ArgumentError(f"device={device!r} is not available on this machine ({reason}) — pass device='cpu' or "
                            "leave device=None (the model's own device)") from None


def _recurrence_map(model, example, recurrence, dtype):
    from .adapters.native import native_loop

    device = next(model.parameters()).device
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in example.kwargs.items()}
    looped = native_loop(model, kwargs, recurrence)
    if dtype is not None:
        looped = looped.to(dtype=dtype)
    looped.meta.update(layer=0, mode="loop")
    return looped


def _resolve_layers(model, layers) -> list[int]:
    """Block indices as ints, each in range and named once (negatives count from the end)."""
    path, blocks, _ = find_blocks(model)
    count = len(blocks)
    if layers is None:
        return list(range(count))
    items = _as_list(layers)
    if not items:
        raise ArgumentError(f"layers is empty, which would measure nothing — pass None for all {count} blocks, or "
                            f"indices in 0..{count - 1}")
    indices = []
    for item in items:
        if not _is_index(item):
            hint = " (for all blocks pass layers=None)" if isinstance(item, str) else ""
            raise ArgumentError(f"layers must be int block indices, got {type(item).__name__} {item!r}{hint} — pass "
                                f"e.g. layers=[0, {count - 1}]")
        indices.append(operator.index(item))
    resolved = [block_index(index, count, path) for index in indices]
    repeated = sorted({block for block in resolved if resolved.count(block) > 1})
    if repeated:
        given = [index for index, block in zip(indices, resolved) if block == repeated[0]]
        raise ArgumentError(f"layers names block {repeated[0]} more than once ({', '.join(map(str, given))}) — pass "
                            "each layer once")
    return indices


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
    diagnostics = _resolve_diagnostics(diagnostics)
    _check_options(k, eigen_k, spectral_samples, loops, seed, eigen_restarts, dtype, device, input_labels, progress)
    # Plain ints from here on (numpy integers are accepted, and would not serialize into the report).
    loops, k, eigen_k, spectral_samples = as_int(loops), as_int(k), as_int(eigen_k), as_int(spectral_samples)
    eigen_restarts, seed = as_int(eigen_restarts), as_int(seed)
    setup = _setup(model, mode, layers, recurrence, eta)
    model, mode, native, recurrences, recurrent = setup.model, setup.mode, setup.native, setup.recurrences, setup.recurrent
    # The blocks (and the layer indices) are checked before the inputs: a bare module or a bad index is named
    # before any tokenizer or forward runs.
    layer_list = [0] if (native or recurrent) else _resolve_layers(model, layers)
    prepared = prepare_model(model)
    notes = setup.notes + list(prepared.notes)
    rows: list[LayerResult] = []
    used_k: list[int] = []  # the k each row ran with (clamped to its state size, said in the notes)
    started = time.perf_counter()
    try:
        if native:
            # A reference looped model exposes its own recurrence: no adapter, one "layer" (the loop itself).
            examples = _native_examples(model, inputs)
        else:
            model_inputs = prepare_inputs(model, inputs, tokenizer, max_length=max_length)
            notes += [note for note in model_inputs.notes if note not in notes]
            examples = model_inputs.examples()
        if input_labels is not None:
            if len(input_labels) != len(examples):
                raise ArgumentError(f"input_labels has {len(input_labels)} names for {len(examples)} inputs — give "
                                    "one per input")
            for example, name in zip(examples, input_labels):
                example.labels[0] = str(name)
        shard, gather = _shard(examples)
        bar = progress_bar(len(shard) * len(layer_list), "jacobiscope analyze", unit="row",
                           enabled=False if progress is False else None)
        outcome = getattr(model, "loop_outcome", None) if native else None
        for global_index, example in shard:
            if native:
                maps = [_native_map(model, example, dtype)]
            elif recurrent:
                maps = [_recurrence_map(prepared.model, example, recurrence, dtype)]
            else:
                maps = build_maps(prepared, example, layer_list, mode, eta, dtype)
            for looped in maps:
                if device is not None:
                    looped = looped.to(device=device)
                used = _clamped_sizes(looped, loops, k, eigen_k, spectral_samples, notes)
                used_k.append(used[0])
                with warnings.catch_warnings():  # the report's notes say it, once, instead
                    warnings.simplefilter("ignore", SlowDerivativesWarning)
                    rows.append(_measure(looped, global_index, example.labels[0], mode, loops, diagnostics, *used[:2],
                                         eigen_restarts, used[2], seed))
                rows[-1].flags.extend(flag for flag in example_flags(example) if flag not in rows[-1].flags)
                if uses_reverse_products(looped) and _REVERSE_NOTE not in notes:
                    notes.append(_REVERSE_NOTE)
                if callable(outcome):
                    rows[-1].outcome = dict(outcome(example.kwargs["input_ids"], loops)[0])
                bar.update(1)
        bar.close()
        rows = gather(rows)
        for note in prepared.notes:
            if note not in notes:
                notes.append(note)
    finally:
        prepared.restore()
    if any(note.startswith(("model switched", "attention implementation switched")) for note in notes):
        notes.append("the model was restored to its original state afterwards")
    rows.sort(key=lambda row: (row.input_index, row.layer))
    if native:
        adapter = "native loop_map"
    elif recurrent:
        adapter = f"native recurrence {recurrence or recurrences[0]!r}"
    else:
        adapter = None
    k_used = max(used_k) if used_k else k
    provenance = _provenance(model, rows, adapter, mode, eta, native, loops, k_used, diagnostics, dtype, device, seed,
                             len(examples), time.perf_counter() - started)
    if k_used != k:
        provenance["k_requested"] = k  # "k" is what ran: the state had fewer entries than the k asked for
    return Report(rows=rows, provenance=provenance, notes=notes)


def _clamped_sizes(looped, loops: int, k: int, eigen_k: int, spectral_samples: int, notes: list) -> tuple:
    """k, eigen_k and spectral_samples as they can run on this map: at most the state size ``D`` (a D-dimensional
    map has D exponents and D eigenvalues) and the ``loops + 1`` states — each clamp said (a warning and a note),
    never silent."""
    x0 = looped.x0
    size = int((x0[0] if looped.batch_dims == 1 else x0).numel())
    why = f"the state has D={size} entries (a D-dimensional map has D exponents)"
    k = clamped_count(k, size, "k", why, notes=notes, stacklevel=4)
    eigen_k = clamped_count(eigen_k, size, "eigen_k", f"the Jacobian has D={size} eigenvalues", notes=notes,
                            stacklevel=4)
    spectral_samples = clamped_count(spectral_samples, loops + 1, "spectral_samples",
                                     f"the trajectory has {loops + 1} states (loops={loops})", notes=notes,
                                     stacklevel=4)
    return k, eigen_k, spectral_samples


def example_flags(example) -> list:
    """The flags an input carries into each of its rows (text truncated by max_length, ...)."""
    return list(getattr(example, "flags", None) or [])


def _provenance(model, rows, adapter, mode, eta, native, loops, k, diagnostics, dtype, device, seed, inputs,
                seconds) -> dict:
    """How to reproduce the numbers: the model, the adapter (or the model's own loop), the settings, versions."""
    if adapter is not None:
        blocks = [model]
    else:
        _, blocks, spec = find_blocks(model)
        adapter = spec.name if spec is not None else "generic"
        from .adapters.looped import attention_is_traced

        if mode == "attention" and attention_is_traced(spec):
            adapter += " blocks, traced attention"  # the parts were read off a block call (the notes say which)
    model_eta = getattr(getattr(model, "config", None), "eta", None) if native else None
    return {
        "model": public_name(getattr(model, "name_or_path", "") or type(model).__name__),
        "model_class": type(model).__name__,
        "adapter": adapter,
        "layers": sorted({row.layer for row in rows}),
        "blocks": len(blocks),
        "mode": mode,
        "eta": (1.0 if eta is None else eta) if mode == "attention" else model_eta,
        "loops": loops,
        "k": k,
        "diagnostics": list(diagnostics),
        "dtype": rows[0].dtype if rows else str(dtype),
        "device": str(device or next(model.parameters()).device),
        "seed": seed,
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
    layer = looped.meta.get("layer", 0)
    state = x0[0] if looped.batch_dims == 1 else x0
    bad = int((~torch.isfinite(state)).sum())
    where = "the loop" if mode == "loop" else f"layer {layer}"
    tokens = state.shape[0] if state.dim() >= 2 else 1
    first = float(state.double().norm() / math.sqrt(tokens))
    return LayerResult(
        input_index=input_index, input_label=label, layer=layer, mode=mode, eta=looped.meta.get("eta"), loops=loops,
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


def _shard(examples):
    """Split the examples across accelerate processes (if any); return (my examples, gather function)."""
    indexed = list(enumerate(examples))
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


@dataclass
class LayerPlan:
    """One line of `describe`: what `analyze` would measure for one (input, layer)."""

    input_index: int
    input_label: str
    layer: int
    state_shape: list[int]
    state_size: int
    forward_seconds: float
    forward_equivalents: float
    estimated_seconds: float
    #: estimated seconds of each diagnostic (compare with `LayerResult.timings` after `analyze`)
    per_diagnostic_seconds: dict | None = None

    def __str__(self) -> str:
        return (f"input {self.input_index} layer {self.layer}: state {self.state_shape} (D={self.state_size}), "
                f"~{self.forward_equivalents:.0f} block forwards, ~{self.estimated_seconds:.1f} s")


def _operation_seconds(looped, x0, k: int) -> dict:
    """Seconds of one forward, jvp, vjp and k-tangent vmapped jvp of this map at ``x0`` (each the fastest of three
    after a warm-up call, so dispatch set-up is not counted)."""
    from .linalg.operators import jacobian_matmat, jvp, vjp

    tangent = torch.randn_like(x0)
    block = torch.randn(max(1, min(k, int(x0[0].numel()))), *x0.shape, dtype=x0.dtype, device=x0.device)
    operations = {"forward": lambda: looped(x0), "jvp": lambda: jvp(looped, x0, tangent),
                  "vjp": lambda: vjp(looped, x0, tangent), "jvp_block": lambda: jacobian_matmat(looped, x0, block)}
    prices = {}
    for name, operation in operations.items():
        with torch.no_grad() if name == "forward" else torch.enable_grad():
            operation()
            runs = []
            for _ in range(3):  # the fastest of three: a busy moment of the machine is not the block's cost
                start = time.perf_counter()
                operation()
                runs.append(time.perf_counter() - start)
            prices[name] = min(runs)
    return prices


def _seconds(cost, prices: dict) -> float:
    if isinstance(cost, dict):
        unknown = set(cost) - set(prices)
        if unknown:
            raise ArgumentError(f"a diagnostic's cost names unknown operations {sorted(unknown)} — use forward, jvp, "
                                "vjp and jvp_block")
        return sum(count * prices[name] for name, count in cost.items())
    return float(cost) * prices["forward"]


def describe(model, inputs, tokenizer=None, layers=None, mode: str | None = None, loops: int = 32, diagnostics=None,
             k: int = 4, *, eigen_k: int = 4, spectral_samples: int = 3, max_length: int | None = 512,
             recurrence: str | None = None) -> list[LayerPlan]:
    """Dry run of `analyze`: what would be measured, the state sizes, and an estimated cost.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> plans = jacobiscope.describe(model, torch.tensor([[1, 2, 3]]), loops=8)
        >>> [(p.layer, p.state_size) for p in plans]
        [(0, 48), (1, 48)]

    Each diagnostic states its cost as counts of block operations (forwards, jvps, vjps, k-tangent vmapped jvps:
    `Diagnostic.cost`); describe times each operation once on each block (after a warm-up) and prices the counts.
    ``per_diagnostic_seconds`` holds each diagnostic's estimate, to compare with `LayerResult.timings`.
    """
    diagnostics = _resolve_diagnostics(diagnostics)
    _check_options(k, eigen_k, spectral_samples, loops)
    setup = _setup(model, mode, layers, recurrence)
    model, native, recurrent = setup.model, setup.native, setup.recurrent
    layer_list = [0] if (native or recurrent) else _resolve_layers(model, layers)
    prepared = prepare_model(model)
    plans = []
    try:
        if native:  # the model's own recurrence, exactly as analyze measures it
            examples = _native_examples(model, inputs)
        else:
            examples = prepare_inputs(model, inputs, tokenizer, max_length=max_length).examples()
        for index, example in enumerate(examples):
            if native:
                maps = [_native_map(model, example, None)]
            elif recurrent:
                maps = [_recurrence_map(prepared.model, example, recurrence, None)]
            else:
                maps = build_maps(prepared, example, layer_list, setup.mode, None, None)
            for looped in maps:
                x0 = looped.x0
                prices = _operation_seconds(looped, x0, k)
                options = {"k": k, "eigen_k": eigen_k, "spectral_samples": spectral_samples}
                # The trajectory itself, then each diagnostic's own estimate (registered ones included).
                costs = {diagnostic.name: _seconds(diagnostic.cost(int(x0[0].numel()), loops, options), prices)
                         for diagnostic in resolve(diagnostics)}
                total = loops * prices["forward"] + sum(costs.values())
                plans.append(LayerPlan(index, example.labels[0], looped.meta["layer"], list(x0.shape[1:]),
                                       int(x0[0].numel()), prices["forward"], total / prices["forward"], total, costs))
    finally:
        prepared.restore()
    return plans
