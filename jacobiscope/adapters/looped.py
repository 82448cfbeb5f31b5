"""`looped_block`: one Hugging Face block (or its attention, in the ItrSA form) as a `LoopedMap`."""
from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

from ..maps import LoopedMap
from ._composite import CompositeBlock
from ._layouts import LayoutReplay, to_batch_first
from ._offload import execution_device, is_offloaded, materialized_copy, offload_gaps
from ._infer import infer_attention
from .capture import ReplayedModule, capture_calls, hidden_state_of
from .inputs import ModelInputs, prepare_inputs
from .spec import AdapterError, find_blocks

__all__ = ["looped_block", "LoopedAttention", "prepare_model", "PreparedModel", "block_index", "unwrap_model"]

_FORWARD_AD_SAFE = ("eager", "sdpa")  # sdpa runs forward-mode AD through its math backend (see linalg.operators)
_HALF = (torch.float16, torch.bfloat16)


class LoopedAttention(nn.Module):
    """The ItrSA form with a block's own weights: ``X -> Norm(X + eta * Attn(X))``.

    ``attention`` is the block's attention replayed with the arguments the model gave it; ``output`` is an
    optional projection after it (BERT); ``norm`` the block's norm. `drive` is ``Attn(X)``, so the map's
    pseudo-energy is ``-Tr(X^T Attn(X))``.
    """

    def __init__(self, attention: ReplayedModule, norm: nn.Module, output: nn.Module | None, eta: float):
        super().__init__()
        self.attention = attention
        self.norm = norm
        self.output = output
        self.eta = float(eta)

    def drive(self, x: torch.Tensor) -> torch.Tensor:
        y = self.attention(x)
        return self.output(y) if self.output is not None else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.eta * self.drive(x))


class PreparedModel:
    """A model made ready for diagnostics (eval mode, attention that forward-mode AD passes through), and the
    notes saying what was changed. ``restore()`` puts the model back as it was."""

    def __init__(self, model: nn.Module, notes: list[str], restore_actions: list):
        self.model = model
        self.notes = notes
        self._restore_actions = restore_actions

    def add_restore(self, actions: list) -> None:
        """Run ``actions`` (in reverse order) when the model is restored."""
        self._restore_actions.extend(actions)

    def restore(self) -> None:
        for action in reversed(self._restore_actions):
            action()
        self._restore_actions = []


def _model_device_and_dtype(model: nn.Module):
    parameter = next(model.parameters(), None)
    if parameter is None:
        return torch.device("cpu"), torch.float32
    if parameter.is_meta:  # offloaded by accelerate: it computes on its hooks' execution device
        return execution_device(model) or torch.device("cpu"), parameter.dtype
    return parameter.device, parameter.dtype


def unwrap_model(model):
    """``(the model inside a training wrapper, a note or None)``.

    ``DataParallel`` / ``DistributedDataParallel`` (and accelerate's or DeepSpeed's engines, which follow them)
    keep the model in ``.module``; ``torch.compile`` in ``._orig_mod``. The wrapper has no ``config`` and no
    blocks of its own, and its forward may scatter across devices, so the diagnostics run on the inner model (the
    same weights).
    """
    note = None
    seen = 0
    while seen < 4 and not _is_measurable(model):
        _refuse_sharded(model)
        inner = getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module) or inner is model:
            break
        note = f"{type(model).__name__} wrapper unwrapped: measured its inner {type(inner).__name__} (same weights)"
        model, seen = inner, seen + 1
    return model, note


def _refuse_sharded(model) -> None:
    """FSDP (FullyShardedDataParallel, or FSDP2's `fully_shard`) with its weights sharded over several processes
    runs collectives in every forward: the processes would have to run the very same forwards and products, which
    the diagnostics (per-input sharding, iterations until convergence) do not. Refused with the fix. One process
    holds whole weights: measured like the plain model."""
    if not isinstance(model, nn.Module):
        return  # not a model at all: said by the checks that follow
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # a torch built without distributed: nothing can be sharded
        return
    for module in model.modules():
        if isinstance(module, FullyShardedDataParallel):
            world = int(getattr(module, "world_size", 1))
        elif isinstance(module, FSDPModule):
            mesh = next((getattr(p, "device_mesh", None) for p in module.parameters()), None)
            world = int(mesh.size()) if mesh is not None else 1
        else:
            continue
        if world > 1:
            raise AdapterError(
                f"{type(module).__name__} shards its weights over {world} processes (FSDP): every forward gathers them "
                "with collectives that all processes must run in step, which the diagnostics' per-input work does "
                "not do — measure a whole copy on one process: save a full state dict "
                "(torch.distributed.checkpoint.state_dict.get_model_state_dict(model, options=StateDictOptions("
                "full_state_dict=True))), load it into the plain model and analyze that (DDP-wrapped models are fine)")
        return


def _is_measurable(model) -> bool:
    """A model jacobiscope reads directly: a transformers model (config), or one with a loop of its own."""
    return (getattr(model, "config", None) is not None or callable(getattr(model, "loop_map", None))
            or bool(getattr(model, "jacobiscope_recurrences", None)))


def prepare_model(model: nn.Module, attn_implementation: str | None = None) -> PreparedModel:
    """Check the model and put it in a state the diagnostics can use; say what was changed.

    Refuses a model on the meta device; switches dropout off (eval mode); switches attention implementations
    that forward-mode AD cannot pass through (flash, flex, ...) to eager. Capture must happen after this,
    because the masks a block receives depend on the attention implementation.
    """
    if not isinstance(model, nn.Module):
        loaded = f"transformers.AutoModel.from_pretrained({model!r})" if isinstance(model, str) else "the model object"
        raise AdapterError(f"Expected a transformers model (an nn.Module), got {type(model).__name__} — pass {loaded}")
    _refuse_sharded(model)
    notes, restore = [], []
    # Any meta parameter, not only the first; weights accelerate offloads (device_map with CPU / disk offload) are
    # meta too, but a hook loads them: those are measured, one block in memory at a time.
    if any(parameter.is_meta for parameter in model.parameters()):
        gaps = offload_gaps(model)
        if gaps or not is_offloaded(model):
            raise AdapterError(
                "The model's weights are on the meta device (not loaded): its Jacobian is undefined"
                + (f" ({len(gaps)} weights no offload hook loads, first {gaps[0]!r})" if gaps else "")
                + ". Load it with from_pretrained(...) without device_map='meta'/init_empty_weights (device_map with "
                "CPU or disk offload is fine), or materialize it before analysing.")
        notes.append(f"weights offloaded by accelerate: each looped block is loaded onto {execution_device(model)} "
                     "while it is measured (a copy of that block; the model stays offloaded)")
    if model.training:
        model.eval()
        notes.append("model switched to eval mode (dropout off) for the diagnostics")
        restore.append(lambda: model.train())
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    wanted = attn_implementation
    if wanted is None and current is not None and current not in _FORWARD_AD_SAFE:
        wanted = "eager"
    if wanted is not None and current is not None and wanted != current:
        if not hasattr(model, "set_attn_implementation"):
            raise AdapterError(f"Cannot switch attention from {current!r} to {wanted!r}: the model has no set_attn_implementation.")
        model.set_attn_implementation(wanted)
        notes.append(
            f"attention implementation switched {current} -> {wanted} (forward-mode AD does not pass through fused "
            f"{current} kernels); captured after the switch"
        )
        restore.append(lambda: model.set_attn_implementation(current))
    elif current == "sdpa":
        notes.append("sdpa attention: jvps run on its math backend (the fused kernels have no forward-mode AD)")
    _eager_experts(model, config, notes, restore)
    return PreparedModel(model, notes, restore)


def _eager_experts(model, config, notes: list, restore: list) -> None:
    """Mixture-of-experts layers dispatch on ``config._experts_implementation``; the fused ones (grouped_mm, ...)
    have no forward-mode AD, the eager per-expert loop computes the same sums and has."""
    current = getattr(config, "_experts_implementation", None)
    if current in (None, "eager") or not hasattr(model, "set_experts_implementation"):
        return
    try:
        model.set_experts_implementation("eager")
    except (ValueError, NotImplementedError) as error:
        notes.append(f"experts implementation {current} kept ({str(error).splitlines()[0]}): jvps may fail in it")
        return
    notes.append(f"experts implementation switched {current} -> eager (forward-mode AD does not pass through "
                 f"{current}); restored afterwards")
    restore.append(lambda: model.set_experts_implementation(current))


def block_index(layer: int, count: int, path: str) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise AdapterError(f"layer must be an int block index, got {type(layer).__name__} {layer!r} — pass e.g. "
                           f"layer=0 (0..{count - 1}, negatives count from the end)")
    if not -count <= layer < count:
        raise AdapterError(f"layer {layer} is out of range: the model has {count} blocks at '{path}' (0..{count - 1}) — "
                           f"pass 0..{count - 1} (or -1..-{count} from the end).")
    return layer % count


def _submodule(block: nn.Module, path: str | None, what: str, spec_name: str) -> nn.Module:
    if path is None:
        raise AdapterError(
            f"mode='attention' needs the {what} path of the block, and the adapter '{spec_name}' has none. "
            "Register one: jacobiscope.register_adapter(model_type, attention=..., attention_norm=...)."
        )
    try:
        return block.get_submodule(path)
    except AttributeError as error:
        children = [name for name, _ in block.named_children()]
        raise AdapterError(
            f"The adapter '{spec_name}' names the {what} '{path}', but {type(block).__name__} has no such submodule "
            f"(its children: {children})."
        ) from error


def attention_is_traced(spec) -> bool:
    """Whether mode='attention' reads its parts off a traced block call (no spec names them)."""
    return spec is None or (spec.attention is None and spec.attention_norm is None)


def _adapter_name(spec, mode: str) -> str:
    if mode == "attention" and attention_is_traced(spec):
        return "traced"
    return spec.name if spec is not None else "generic"


def capture_target(block: nn.Module, spec) -> nn.Module:
    """The module whose call carries the block's arguments: the block, or its spec's ``capture_at`` submodule."""
    if spec is None or not spec.capture_at:
        return block
    return _submodule(block, spec.capture_at, "capture_at", spec.name)


def build_maps(prepared: PreparedModel, model_inputs: ModelInputs, layers: list[int], mode: str, eta: float | None,
               dtype: torch.dtype | None, name: str | None = None, found: tuple | None = None) -> list[LoopedMap]:
    """Capture once, then build one `LoopedMap` per requested layer (internal to `looped_block` and the map
    source); ``found`` is ``find_blocks(model)`` when the caller has it already (the blocks are looked up once)."""
    model = prepared.model
    if mode not in ("block", "attention"):
        raise AdapterError(f"mode must be 'block' or 'attention', got {mode!r} — pass one of them (a model's own loop: "
                           "jacobiscope.native_loop).")
    path, blocks, spec = found if found is not None else find_blocks(model)
    indices = [block_index(layer, len(blocks), path) for layer in layers]
    composite = isinstance(blocks[indices[0]], CompositeBlock) if indices else False
    targets, parts = _capture_plan(model, blocks, spec, indices, mode, composite)
    device, model_dtype = _model_device_and_dtype(model)
    kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in model_inputs.kwargs.items()}
    if "inputs_embeds" in kwargs and kwargs["inputs_embeds"].is_floating_point():
        kwargs["inputs_embeds"] = kwargs["inputs_embeds"].to(model_dtype)
    records = capture_calls(model, kwargs, targets)
    if not composite:
        # one record per block, followed by its attention's when a spec names the attention
        stream = iter(records)
        records = [(next(stream), None if mode == "block" or parts[position] is None else next(stream))
                   for position in range(len(indices))]
    compute_dtype = dtype
    if compute_dtype is None and model_dtype in _HALF:
        compute_dtype = torch.float32
        _note(prepared, f"model weights are {str(model_dtype).replace('torch.', '')}: the maps compute in float32 (a "
                        "copy of each block)")
    model_name = name or getattr(model, "name_or_path", None) or type(model).__name__
    layout = spec.state_layout if spec is not None else "batch_first"
    maps = []
    for position, index in enumerate(indices):
        blocks, parts = _loaded_block(blocks, parts, index, position, device, composite)
        if composite:
            count = len(blocks[index].capture_targets())
            calls = records[position * count:(position + 1) * count]
            x0 = to_batch_first(hidden_state_of(*calls[0]), layout).detach()
            module, drive = blocks[index].bind(calls, model, kwargs), None
        elif mode == "block":
            module, x0, drive = _block_module(blocks[index], records[position][0], layout)
        else:
            module, x0, drive = _attention_module(prepared, blocks[index], records[position], parts, position, eta,
                                                  model_inputs.initial_states)
        if mode == "block":
            if layout != "batch_first":
                module = LayoutReplay(module, layout)
            if model_inputs.initial_states is not None:
                x0 = model_inputs.initial_states.to(device=x0.device, dtype=x0.dtype)
        module.training = False  # the wrapper only; the block's own mode was set by prepare_model
        looped = LoopedMap(module, batch_dims=1, state_shape=tuple(x0.shape[1:]), drive=drive, x0=x0,
                           name=f"{model_name} layer {index} ({mode})")
        if compute_dtype is not None and compute_dtype != x0.dtype:
            looped = looped.to(dtype=compute_dtype)
        info = looped.info
        info.model, info.layer, info.mode = str(model_name), index, mode
        info.blocks_path, info.adapter, info.notes = path, _adapter_name(spec, mode), list(prepared.notes)
        info.set("eta", None if mode == "block" else module.eta)  # said even when None: a block has no step size
        maps.append(looped)
    return maps


def _loaded_block(blocks, parts: list, index: int, position: int, device, composite: bool):
    """``(blocks, parts)`` with block ``index`` replaced by a copy whose offloaded weights are loaded (and its
    attention-mode parts by the copy's own), when accelerate offloads it; unchanged otherwise."""
    block = blocks[index]
    if not any(parameter.is_meta for parameter in block.parameters()):
        return blocks, parts
    if composite:
        raise AdapterError(f"{type(block).__name__} layers are assembled from parallel lists, which an offloaded "
                           "model cannot be measured through — load the model without offload (device_map=None)")
    loaded = materialized_copy(block, device)
    twins = {id(original): twin for original, twin in zip(block.modules(), loaded.modules())}
    blocks = list(blocks)
    blocks[index] = loaded
    if parts and parts[position] is not None:
        parts = list(parts)
        parts[position] = tuple(twins.get(id(part), part) for part in parts[position])
    return blocks, parts


def _note(prepared: PreparedModel, note: str) -> None:
    if note not in prepared.notes:
        prepared.notes.append(note)


def _capture_plan(model, blocks, spec, indices: list[int], mode: str, composite: bool):
    """The modules whose calls the capture records (each block, and its attention when a spec names it), and per
    block the attention-mode parts ``(attention, norm, output, norm position)`` (``None``: traced later)."""
    targets, parts = [], []
    for index in indices:
        block = blocks[index]
        if composite:
            if mode == "attention":
                raise AdapterError(f"mode='attention' is not available for {type(block).__name__} layers (assembled "
                                   "from parallel lists, no attention spec); use mode='block'.")
            targets.extend(block.capture_targets())
            continue
        targets.append(capture_target(block, spec))
        if mode == "attention":
            if attention_is_traced(spec):
                parts.append(None)  # no spec names the parts: traced from the block's own call after the capture
                continue
            attention = _submodule(block, spec.attention, "attention", spec.name)
            norm = _submodule(block, spec.attention_norm, "attention_norm", spec.name)
            output = _submodule(block, spec.attention_output, "attention_output", spec.name) if spec.attention_output else None
            targets.append(attention)
            parts.append((attention, norm, output, spec.resolved_norm_position(model.config)))
    return targets, parts


def _block_module(block, record, layout: str):
    """The block replayed with the arguments the model gave it, and the state entering it."""
    block_args, block_kwargs = record
    x0 = to_batch_first(hidden_state_of(block_args, block_kwargs), layout).detach()
    return ReplayedModule(block, block_args, block_kwargs), x0, None


def _attention_module(prepared: PreparedModel, block, record, parts: list, position: int, eta, initial_states):
    """The ItrSA form of one block (`LoopedAttention`), its initial state (on the norm's manifold for pre-norm
    families) and its drive; parts no spec names are traced from the block's own call (said in the notes)."""
    (block_args, block_kwargs), attention_call = record
    if parts[position] is None:
        traced = infer_attention(block, block_args, block_kwargs)
        parts[position] = (traced.attention, traced.norm, traced.output, traced.norm_position)
        attention_call = (traced.attention_args, traced.attention_kwargs)
        model_type = getattr(prepared.model.config, "model_type", "?")
        _note(prepared, f"attention mode: no adapter spec for model_type '{model_type}'; traced from one call of the "
                        f"block: {traced.describe()}")
    attention_args, attention_kwargs = attention_call
    attention, norm, output, norm_position = parts[position]
    x0 = hidden_state_of(block_args, block_kwargs).detach()
    if initial_states is not None:
        x0 = initial_states.to(device=x0.device, dtype=x0.dtype)
    if norm_position == "pre":
        # The state of the ItrSA form is the normalized stream: start on the norm's manifold.
        with torch.no_grad():
            x0 = norm(x0).detach()
    module = LoopedAttention(ReplayedModule(attention, attention_args, attention_kwargs), norm, output,
                             1.0 if eta is None else eta)
    return module, x0, module.drive


def looped_block(model: nn.Module, inputs, layer: int, mode: str = "block", eta: float | None = None, *,
                 tokenizer=None, dtype: torch.dtype | None = None, attn_implementation: str | None = None) -> LoopedMap:
    """One block of a Hugging Face model as a looped map ``X_{t+1} = F(X_t)``.

    Example::

        >>> import torch, transformers, jacobiscope
        >>> config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50)
        >>> model = transformers.GPT2Model(config).eval()
        >>> m = jacobiscope.looped_block(model, torch.tensor([[1, 2, 3, 4]]), layer=1)
        >>> m.x0.shape, m(m.x0).shape
        (torch.Size([1, 4, 16]), torch.Size([1, 4, 16]))

    Arguments:
        model: a transformers model (any family with a spec in ``adapters/``, or found by the generic search).
        inputs: text (str or list of str; the tokenizer is found from the model or passed), a tokenized batch,
            token ids, pixel values, or hidden states ``[B, S, hidden]`` (used as ``x0``).
        layer: block index (negative counts from the end).
        mode: ``"block"`` — the whole layer, replayed with what the model passes it (masks, position ids, rotary
            tables); ``"attention"`` — the ItrSA form ``X <- Norm(X + eta * Attn(X))`` with the block's own
            attention and norm (pre-norm families start from ``Norm(h)``; post-norm ones such as BERT from ``h``).
        eta: step size of the attention mode (default 1.0, which for post-norm families is the block's own
            attention sub-layer).
        dtype: compute dtype (default: the model's; half-precision models compute in float32).
        attn_implementation: force an attention implementation (default: keep eager/sdpa, switch others to eager).

    Returns:
        A `LoopedMap` with ``batch_dims=1`` (one trajectory per example; padded batches keep their masks), ``x0``
        the hidden state entering the layer, and ``info`` (model, layer, mode, adapter, notes).

    The model is put in eval mode (and its attention switched when needed); the map shares the block's weights.
    """
    from ._plan import _check_eta

    _check_eta(eta, mode)  # before the model is touched: a NaN eta, or an eta block mode would ignore
    model, unwrapped = unwrap_model(model)
    prepared = prepare_model(model, attn_implementation)
    if unwrapped:
        prepared.notes.insert(0, unwrapped)
    for note in prepared.notes:
        if note.startswith(("model switched", "attention implementation switched")):
            warnings.warn(f"jacobiscope: {note}.", RuntimeWarning, stacklevel=2)
    model_inputs = prepare_inputs(model, inputs, tokenizer)
    return build_maps(prepared, model_inputs, [layer], mode, eta, dtype)[0]


@contextlib.contextmanager
def prepared(model: nn.Module, attn_implementation: str | None = None):
    """`prepare_model` as a context manager that restores the model afterwards."""
    state = prepare_model(model, attn_implementation)
    try:
        yield state
    finally:
        state.restore()
