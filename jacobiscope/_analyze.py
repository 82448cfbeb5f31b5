"""`jacobiscope.analyze(model, inputs)`: every requested layer of a Hugging Face model as a looped dynamical
system, measured, with a verdict per layer. `describe` is the dry run.

Plan, shard, measure each: `jacobiscope.adapters.map_source` decides how the model loops and builds each input's
maps (the one place that does), the inputs are sharded across accelerate processes, each map is measured.
"""
from __future__ import annotations

import logging
import math
import os
import platform
import time
import warnings

import torch

from .adapters._source import map_source
from .errors import SlowDerivativesWarning, StepError
from ._progress import progress_bar
from .diagnostics import measure
from .linalg._reverse_products import uses_reverse_products
from .report import LayerResult, Report
from ._analyze_describe import LayerPlan, LayerPlans, describe
from ._analyze_options import check_diagnostic_options, check_options, resolve_diagnostics
from ._analyze_resume import CONTINUE_HINT, call_arguments, open_checkpoint
from .hub import model_or_loaded
from ._validation import as_int, clamped_count

__all__ = ["analyze", "describe", "DIAGNOSTICS", "LayerPlan", "LayerPlans"]

logger = logging.getLogger(__name__)

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
    options: dict | None = None,
    checkpoint=None,
    resume: bool = False,
) -> Report:
    """Measure each requested layer of ``model`` as a looped map ``X_{t+1} = F(X_t)`` on ``inputs``.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3, 4, 5]]), loops=8, progress=False)
        >>> [row.layer for row in report.rows], report.rows[0].regime in jacobiscope.dynamics.REGIMES
        ([0, 1], True)

    Arguments:
        model: a transformers model (see `looped_block` for the families and the adapter mechanism), or its name:
            ``"minilm"``, a shipped checkpoint (``"itrsa-sudoku"``), a model folder or a Hub id in the local cache,
            loaded as `jacobiscope.hub.load_pretrained` loads it (safetensors, offline, no remote code: load a
            remote-code model yourself with ``trust_remote_code=True`` and pass the object).
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
        diagnostics: names of registered diagnostics (`jacobiscope.list_diagnostics`; default: every one that runs
            by default). State norms and step sizes are always recorded.
        k: number of Lyapunov exponents (tangent vectors).
        dtype: compute dtype (default: the model's; float32 for half-precision models, said in the notes).
        device: run the diagnostics on this device (the block is copied there; the model is not moved).
        eta: attention-mode step size (default 1.0).
        eigen_k: eigenvalues (largest modulus) summarized at the last finite loop (Arnoldi for large states, to
            a relative residual of 1e-3 within ``eigen_restarts`` restarts; the largest residual is recorded in
            ``oscillation["max_residual"]`` and a row is flagged when it exceeds 0.05).
        spectral_samples: loops at which the spectral norm is measured (evenly spaced, first and last included).
        seed: seed of every random start vector and tangent frame, and of the model's own forward where it draws
            random numbers (ViT-MAE's masking, Huginn's initial state: said in the notes; your random state is
            left as it was).
        max_length: tokenizer truncation for text inputs.
        progress: a progress bar on stderr (a widget in Jupyter) counting rows (input x layer); ``None`` (default)
            shows it once the run has taken 2 s, ``False`` never.
        input_labels: one name per input for the report (default: a snippet of each input).
        options: settings of the diagnostics that take their own (``{"basin_starts": 16}`` for ``fixed_points``,
            ``{"halting_thresholds": [1e-2, 1e-3]}`` for ``halting``; `measure`), checked before the model runs.
        checkpoint: a JSON path: the report so far is written there (atomically) after every finished row, and the
            whole report at the end. Ctrl-C (KeyboardInterrupt) or an error leaves a valid partial report there
            (`Report.from_json` reads it; ``provenance["partial"]`` lists the rows that remain) and is re-raised.
            An existing partial report is never overwritten: pass ``resume=True`` to continue it, or remove it.
        resume: continue the partial report at ``checkpoint``: only its remaining rows are measured, and the result
            equals an uninterrupted run's (same numbers, same seeds). Refused (`ArgumentError` naming the first
            difference) when this call's arguments, model or inputs differ from the ones the file records.

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
    model = model_or_loaded(model)
    check_options(k, eigen_k, spectral_samples, loops, seed, eigen_restarts, dtype, device, input_labels, progress)
    options = check_diagnostic_options(diagnostics, options)
    # Plain ints from here on (numpy integers are accepted, and would not serialize into the report).
    sizes = {"loops": as_int(loops), "k": as_int(k), "eigen_k": as_int(eigen_k), "spectral_samples":
             as_int(spectral_samples), "eigen_restarts": as_int(eigen_restarts), "seed": as_int(seed)}
    arguments = call_arguments(sizes, layers, mode, recurrence, diagnostics, dtype, device, eta, max_length, options,
                               inputs)
    store = open_checkpoint(checkpoint, resume, arguments)
    started = time.perf_counter()
    with map_source(model, inputs, tokenizer=tokenizer, layers=layers, mode=mode, recurrence=recurrence, eta=eta,
                    dtype=dtype, device=device, max_length=max_length, input_labels=input_labels,
                    seed=sizes["seed"]) as source:
        run = _Run(source, diagnostics, sizes, options, arguments, store, dtype, device, started)
        rows = run.measure_all(progress)
    return run.report(rows, time.perf_counter() - started)


class _Run:
    """One `analyze` call inside its map source: the rows to measure (all, or the ones a resumed checkpoint lacks),
    the checkpoint written after each, the report."""

    def __init__(self, source, diagnostics, sizes, options, arguments, store, dtype, device, started):
        self.source, self.diagnostics, self.sizes, self.options = source, diagnostics, sizes, options
        self.arguments, self.store, self.dtype, self.device, self.started = arguments, store, dtype, device, started
        self.notes = list(source.notes)
        self.used = {"k": [], "eigen_k": [], "spectral_samples": []}  # what each row ran with (clamped to its state)
        layers = [0] if source.plan.mode == "loop" else list(source.plan.layers)
        self.planned = [(index, layer) for index in range(len(source)) for layer in layers]
        self.finished = {}
        if store is not None:
            store.check_plan(_model_identity(source), self.planned, source.labels)
            self.finished = {key: row for key, row in store.finished_rows().items() if key in set(self.planned)}
            if store.previous is not None:
                self.notes.extend(note for note in store.previous.notes if note not in self.notes)

    def measure_all(self, progress) -> list:
        todo = [key for key in self.planned if key not in self.finished]
        if self.finished:
            logger.info("resuming %s: %d of %d rows already measured, %d to go", self.store.shown,
                        len(self.finished), len(self.planned), len(todo))
        shard, gather = _shard(sorted({index for index, _ in todo}))
        mine = [key for key in todo if key[0] in set(shard)]
        bar = progress_bar(len(mine), "jacobiscope analyze", unit="row", enabled=False if progress is False else None)
        rows = []
        try:
            for index in shard:
                layers = [layer for i, layer in mine if i == index]
                item = self.source.get(index, layers=None if self.source.plan.mode == "loop" else layers)
                self.notes.extend(note for note in item.notes if note not in self.notes)
                for looped in item.maps:
                    rows.append(_measure_map(looped, item, self.source, self.diagnostics, self.sizes, self.notes,
                                             self.used, self.options))
                    bar.update(1)
                    logger.info("row %d/%d finished: input %d, layer %d (%.2f s)", len(rows), len(mine),
                                rows[-1].input_index, rows[-1].layer, rows[-1].seconds)
                    self._save(rows, "running")
        except BaseException as error:  # Ctrl-C, a crash, a killed worker: the finished rows stay on disk
            self._save(rows, f"{type(error).__name__}: {' '.join(str(error).split())[:200]}".rstrip(": "))
            if self.store is not None and _is_main():
                logger.warning("analyze stopped (%s) after %d of %d rows; the finished rows are in %s — %s",
                               type(error).__name__, len(rows) + len(self.finished), len(self.planned),
                               self.store.shown, CONTINUE_HINT)
            raise
        finally:
            bar.close()
        return gather(rows)

    def _save(self, rows: list, stopped: str | None) -> None:
        if self.store is None or not _is_main() or not (rows or self.finished):
            return  # nothing finished yet: no partial report (it would only block the next run)
        report = self.report(rows, time.perf_counter() - self.started, write=False)
        self.store.write(report, self.planned, stopped)

    def report(self, rows: list, seconds: float, write: bool = True) -> Report:
        """The report of ``rows`` (and the resumed checkpoint's), in (input, layer) order; written to the checkpoint
        as complete when ``write``."""
        rows = sorted(list(self.finished.values()) + list(rows), key=lambda row: (row.input_index, row.layer))
        notes = list(self.notes)
        restored = "the model was restored to its original state afterwards"
        if restored not in notes and any(note.startswith(("model switched", "attention implementation switched"))
                                         for note in notes):
            notes.append(restored)
        if self.store is not None and self.store.previous is not None:
            seconds += float(self.store.previous.provenance.get("seconds") or 0.0)
        provenance = _provenance(self.source.provenance(), rows, self.source.model, self.sizes, self.diagnostics,
                                 self.dtype, self.device, len(self.source), seconds)
        provenance.update(_effective_sizes(self.sizes, self.used, self.store))
        provenance["arguments"] = self.arguments
        report = Report(rows=rows, provenance=provenance, notes=notes)
        if write and self.store is not None and _is_main():
            self.store.write(report, self.planned, None)
            logger.info("report written to %s (%d rows)", self.store.shown, len(rows))
        return report


def _model_identity(source) -> tuple:
    provenance = source.provenance()
    return provenance.model, provenance.model_class


def _effective_sizes(sizes: dict, used: dict, store) -> dict:
    """k, eigen_k and spectral_samples as they ran (the largest any row used: each is clamped to its state), with
    the requested value beside any that was clamped — the provenance never records a size that did not run."""
    previous = store.previous.provenance if store is not None and store.previous is not None else {}
    effective = {}
    for name in ("k", "eigen_k", "spectral_samples"):
        values = list(used[name]) + ([previous[name]] if isinstance(previous.get(name), int) else [])
        ran = max(values) if values else sizes[name]
        effective[name] = ran
        if ran != sizes[name]:
            effective[f"{name}_requested"] = sizes[name]
    effective["eigen_restarts"] = sizes["eigen_restarts"]
    return effective


def _measure_map(looped, item, source, diagnostics, sizes: dict, notes: list, used: dict, options: dict) -> LayerResult:
    """One row: the map measured (its sizes clamped to the state, each clamp said), its input's flags, the model's
    own outcome (a reference solver's: solved or not)."""
    loops = sizes["loops"]
    ran = _clamped_sizes(looped, loops, sizes["k"], sizes["eigen_k"], sizes["spectral_samples"], notes)
    for name, value in zip(("k", "eigen_k", "spectral_samples"), ran):
        used[name].append(value)
    with warnings.catch_warnings():  # the report's notes say it, once, instead
        warnings.simplefilter("ignore", SlowDerivativesWarning)
        try:
            row = _measure(looped, item.index, item.label, source.plan.mode, loops, diagnostics, *ran[:2],
                           sizes["eigen_restarts"], ran[2], sizes["seed"], options)
        except StepError as error:
            if getattr(error, "loop", None) == 1:
                _raise_if_the_model_fails_too(source.model, item.inputs)
            raise
    row.flags.extend(flag for flag in item.flags if flag not in row.flags)
    if uses_reverse_products(looped) and _REVERSE_NOTE not in notes:
        notes.append(_REVERSE_NOTE)
    outcome = getattr(source.model, "loop_outcome", None) if source.plan.own_loop else None
    if callable(outcome):
        row.outcome = dict(outcome(item.inputs["input_ids"], loops)[0])
    return row


def _raise_if_the_model_fails_too(model, inputs: dict) -> None:
    """A block that fails on its first loop ran on the model's own hidden state: when the model's own forward fails
    on these inputs as well, the problem is the model or its inputs (a config whose sizes disagree), not the map —
    say that (`InputError`) instead of asking the user to fix a step they did not write."""
    from .adapters.capture import forward_failure

    try:
        with torch.no_grad():
            model(**inputs)
    except Exception as error:  # noqa: BLE001 - any failure of the model's own forward is the one to report
        raise forward_failure(model, error) from None


def _clamped_sizes(looped, loops: int, k: int, eigen_k: int, spectral_samples: int, notes: list) -> tuple:
    """k, eigen_k and spectral_samples as they can run on this map: at most the state size ``D`` (a D-dimensional
    map has D exponents and D eigenvalues) and the ``loops + 1`` states — each clamp said (a warning and a note),
    never silent."""
    x0 = looped.x0
    size = int((x0[0] if looped.batch_dims == 1 else x0).numel())
    why = f"the state has D={size} entries (a D-dimensional map has D exponents)"
    k = clamped_count(k, size, "k", why, notes=notes, stacklevel=6)
    eigen_k = clamped_count(eigen_k, size, "eigen_k", f"the Jacobian has D={size} eigenvalues", notes=notes,
                            stacklevel=6)
    spectral_samples = clamped_count(spectral_samples, loops + 1, "spectral_samples",
                                     f"the trajectory has {loops + 1} states (loops={loops})", notes=notes,
                                     stacklevel=6)
    return k, eigen_k, spectral_samples


def _provenance(source_provenance, rows, model, sizes: dict, diagnostics, dtype, device, inputs: int,
                seconds: float) -> dict:
    """How to reproduce the numbers: the model, the adapter (or the model's own loop), the settings, versions."""
    return {
        "model": source_provenance.model,
        "model_class": source_provenance.model_class,
        "model_revision": _model_revision(model),
        "adapter": source_provenance.adapter,
        "layers": sorted({row.layer for row in rows}),
        "blocks": source_provenance.blocks,
        "mode": source_provenance.mode,
        "eta": source_provenance.eta,
        "loops": sizes["loops"],
        "k": sizes["k"],
        "diagnostics": list(diagnostics),
        "dtype": rows[0].dtype if rows else str(dtype),
        "device": str(device or next(model.parameters()).device),
        "seed": sizes["seed"],
        "inputs": inputs,
        "seconds": seconds,
        "versions": _versions(),
    }


def _model_revision(model) -> str | None:
    """The Hub commit the model's files came from, when it was loaded from the Hub cache (None for a local folder or
    a model built from a config): the dynamics card pins its numbers to it. Reads the local cache only."""
    config = getattr(model, "config", None)
    commit = getattr(config, "_commit_hash", None)
    if isinstance(commit, str) and commit:
        return commit
    name = getattr(config, "_name_or_path", "") or ""
    if not isinstance(name, str) or not name or os.path.isdir(name) or name.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # an invalid repo id, an unreadable cache: the revision is simply unknown
        return None
    # the cache layout is .../snapshots/<commit>/config.json
    return os.path.basename(os.path.dirname(found)) if isinstance(found, str) else None


def _measure(looped, input_index, label, mode, loops, diagnostics, k, eigen_k, eigen_restarts, spectral_samples,
             seed, options=None) -> LayerResult:
    _check_trajectory_memory(looped, loops, label)
    if not bool(torch.isfinite(looped.x0).all()):
        # The state entering this layer is already NaN/Inf (an earlier layer overflowed, or Inf weights upstream):
        # the map cannot be measured, but the other layers can — a flagged row instead of an error for all.
        return _unmeasured_row(looped, input_index, label, mode, loops)
    return measure(looped, looped.x0, loops=loops, diagnostics=diagnostics, k=k, eigen_k=eigen_k,
                   eigen_restarts=eigen_restarts, spectral_samples=spectral_samples, seed=seed, label=label,
                   input_index=input_index, mode=mode, options=options or None)


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


def _is_main() -> bool:
    """Whether this is the process that writes the checkpoint (the only one, or accelerate's main process)."""
    try:
        from accelerate import PartialState
    except ImportError:  # pragma: no cover
        return True
    state = PartialState(cpu=not torch.cuda.is_available())
    return state.num_processes <= 1 or state.is_main_process
