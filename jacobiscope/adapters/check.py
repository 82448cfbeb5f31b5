"""`check_adapter`: a conformance check anyone can run on a new model family (scikit-learn's check_estimator,
for looped blocks)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from ..errors import AdapterCheckError, JacobiscopeError  # noqa: F401 - AdapterCheckError's old import path
from ..linalg.operators import jvp, vjp
from .capture import forward_failure, hidden_state_of
from .inputs import prepare_inputs
from ._composite import CompositeBlock
from ._layouts import to_batch_first, token_window
from .looped import block_index, build_maps, capture_target, prepare_model, unwrap_model
from .spec import AdapterError, find_blocks

__all__ = ["check_adapter", "AdapterCheckResult", "AdapterCheckError"]


@dataclass
class AdapterCheckResult:
    """The outcome of `check_adapter`: one ``(name, passed, detail)`` per check."""

    model: str
    adapter: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, bool(ok), detail))

    def __str__(self) -> str:
        lines = [f"check_adapter({self.model}) with adapter '{self.adapter}': {'PASS' if self.passed else 'FAIL'}"]
        lines += [f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}" for name, ok, detail in self.checks]
        return "\n".join(lines)


def _default_inputs(model):
    config = model.config
    if getattr(model, "main_input_name", "input_ids") == "pixel_values":
        size = getattr(config, "image_size", 32)
        channels = getattr(config, "num_channels", 3)
        return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(0))
    vocab = int(getattr(config, "vocab_size", 100) or 100)
    return (torch.arange(1, 9) * 7 % max(vocab - 1, 2) + 1).unsqueeze(0)


def check_adapter(model, inputs=None, *, layers: list[int] | None = None, modes=("block", "attention"),
                  rtol: float = 1e-4, raise_on_failure: bool = True) -> AdapterCheckResult:
    """Check that jacobiscope's adapter for ``model`` is right, on real forwards of the model.

    Example::

        >>> import transformers, jacobiscope
        >>> model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50))
        >>> jacobiscope.check_adapter(model).passed
        True

    Checks, per layer (default: the first and the middle one), against one plain forward of the model (hooks
    record what each checked block receives and returns): the captured ``x0`` is the block's own input; one step of
    the block-mode map gives the block's own output; the blocks are the layers the model reports in its
    ``hidden_states`` (the block's input is ``hidden_states[i]``, or — families such as Mamba record each block's
    output — its output is; skipped for the last layer, whose output some families normalize); the map is
    deterministic; in float64 the jvp matches central finite differences and the jvp/vjp pair passes the adjoint
    test ``<u, J v> = <J^T u, v>``; the attention mode (named by the spec, or traced from the block's own call when
    no spec names it) keeps the shape, stays finite and passes the same derivative checks.
    An encoder-decoder's encoder blocks are checked on its encoder's forward (no decoder inputs needed).

    Returns an `AdapterCheckResult`; raises `AdapterCheckError` listing the failures unless
    ``raise_on_failure=False``.
    """
    model, unwrapped = unwrap_model(model)
    prepared = prepare_model(model)
    try:
        path, blocks, spec = find_blocks(model)
        result = AdapterCheckResult(getattr(model, "name_or_path", "") or type(model).__name__,
                                    spec.name if spec is not None else "generic")
        runner, stack = _reference_runner(model, blocks)
        said = [part for part in (stack, unwrapped) if part]
        where = f" ({'; '.join(said)})" if said else ""
        result.add("blocks found", True, f"{len(blocks)} x {type(blocks[0]).__name__} at '{path}'{where}")
        model_inputs = prepare_inputs(model, _default_inputs(model) if inputs is None else inputs)
        if layers is None:
            layers = sorted({0, len(blocks) // 2})
        elif isinstance(layers, int) and not isinstance(layers, bool):
            layers = [layers]
        indices = [block_index(layer, len(blocks), path) for layer in layers]
        device = next(model.parameters()).device
        kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in model_inputs.kwargs.items()}
        own, hidden_states = _own_forward(model, runner, kwargs, [_entry(blocks[i], spec) for i in indices])
        for index, (own_input, own_output) in zip(indices, own):
            _check_layer(result, prepared, model_inputs, (path, blocks, spec), index, own_input, own_output,
                         hidden_states, modes, rtol)
    finally:
        prepared.restore()
    if raise_on_failure and not result.passed:
        raise AdapterCheckError(str(result))
    return result


def _check_layer(result, prepared, model_inputs, found, index: int, own_input, own_output, hidden_states, modes,
                 rtol: float) -> None:
    """One layer's checks against the model's own forward: x0, one step, the hidden states, determinism, the
    derivatives, and the attention mode."""
    _, blocks, spec = found
    layout = spec.state_layout if spec is not None else "batch_first"
    own_input = to_batch_first(own_input, layout)
    if _output_observable(blocks[index], spec):
        own_output = to_batch_first(own_output, layout)
    else:  # the block is not a module the model calls: its output is the model's next hidden state
        own_output = hidden_states[index + 1] if hidden_states is not None and index + 1 < len(hidden_states) else None
    looped = build_maps(prepared, model_inputs, [index], "block", None, None, found=found)[0]
    x0 = looped.x0
    result.add(f"layer {index}: x0 is the block's input", *_close(x0, own_input, rtol))
    with torch.no_grad():
        stepped = looped(x0)
        again = looped(x0)
    result.add(f"layer {index}: the step keeps the state's shape", stepped.shape == x0.shape,
               f"state {tuple(x0.shape)} -> {tuple(stepped.shape)}" + (
                   "" if stepped.shape == x0.shape else ": a looped map must return a state like its input "
                   "(this block changes the shape: loop another block, e.g. one inside a stage)"))
    if own_output is not None:
        result.add(f"layer {index}: step(x0) is the block's output", *_close(stepped, own_output, rtol))
    _check_hidden_states(result, index, len(blocks), own_input, stepped, hidden_states, rtol)
    result.add(f"layer {index}: deterministic", bool(torch.equal(stepped, again)),
               "two calls agree" if torch.equal(stepped, again) else "two calls differ (dropout or a stateful cache?)")
    _check_derivatives(result, looped.to(dtype=torch.float64), f"layer {index} block")
    if "attention" in modes and not isinstance(blocks[index], CompositeBlock):
        try:
            attention_map = build_maps(prepared, model_inputs, [index], "attention", None, None, found=found)[0]
        except AdapterError as error:
            if spec is not None and spec.attention is not None:
                raise  # the spec names parts the model lacks: its own error says which
            # no spec, and the trace shows no ItrSA-form attention: the family is block mode only
            result.add(f"layer {index}: attention mode", True, f"not available, block mode only ({error})")
            return
        with torch.no_grad():
            out = attention_map(attention_map.x0)
        ok = out.shape == attention_map.x0.shape and bool(torch.isfinite(out).all())
        result.add(f"layer {index}: attention mode", ok, f"state {tuple(out.shape)}, finite={bool(torch.isfinite(out).all())}")
        _check_derivatives(result, attention_map.to(dtype=torch.float64), f"layer {index} attention")


def _reference_runner(model, blocks):
    """``(module whose forward is the reference, a note)``: the model itself, or an encoder-decoder's encoder when
    the blocks are the encoder's (the full model would also need decoder inputs, which a check has no use for)."""
    config = getattr(model, "config", None)
    get_encoder = getattr(model, "get_encoder", None)
    if getattr(config, "is_encoder_decoder", False) and callable(get_encoder):
        encoder = get_encoder()
        if isinstance(encoder, torch.nn.Module) and encoder is not model and any(module is blocks for module in encoder.modules()):
            return encoder, "the encoder's blocks, checked on the encoder's own forward"
    return model, ""


def _entry(block, spec):
    """The module whose call carries the block's input: the block, its ``capture_at`` submodule, or the first part
    of a layer assembled from parallel lists."""
    if isinstance(block, CompositeBlock):
        return block.capture_targets()[0]
    return capture_target(block, spec)


def _output_observable(block, spec) -> bool:
    return not isinstance(block, CompositeBlock) and not (spec is not None and spec.capture_at)


def _own_forward(model, runner, kwargs: dict, targets: list):
    """One plain forward of ``runner`` with ``output_hidden_states=True``: ``[(input, output)]`` of each target's
    first call (forward hooks, independent of jacobiscope's capture and replay) and the hidden states tuple (or
    None when the model gives none)."""
    parameters = inspect.signature(runner.forward).parameters
    if runner is not model:  # an encoder takes the encoder's inputs only
        kwargs = {k: v for k, v in kwargs.items() if k in parameters}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    if "output_hidden_states" in parameters or takes_any:
        kwargs = dict(kwargs, output_hidden_states=True)
    if "use_cache" in parameters and "use_cache" not in kwargs:
        # A cache built during the reference run (hybrid linear-attention models keep state in it) would make the
        # blocks' inputs differ from what the replay, which runs without one, gives them.
        kwargs = dict(kwargs, use_cache=False)
    seen: dict[int, tuple] = {}

    def make_hook(position):
        def hook(module, args, hook_kwargs, output):
            if position not in seen:
                seen[position] = (hidden_state_of(tuple(args), dict(hook_kwargs)).detach(), _first_tensor(output))
        return hook

    handles = [target.register_forward_hook(make_hook(i), with_kwargs=True) for i, target in enumerate(targets)]
    try:
        with torch.no_grad():
            outputs = runner(**kwargs)
    except (JacobiscopeError, MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - the model's own forward rejected the inputs: one line, with the fix
        raise forward_failure(model, error) from None
    finally:
        for handle in handles:
            handle.remove()
    missing = [i for i in range(len(targets)) if i not in seen]
    if missing:
        raise AdapterError(f"The forward of {type(model).__name__} never called block {missing[0]} of the adapter's "
                           "blocks: they are not the layers this model runs — register the right block_class with "
                           "jacobiscope.register_adapter(...)")
    hidden_states = getattr(outputs, "hidden_states", None)
    if hidden_states is None and isinstance(outputs, tuple):
        hidden_states = next((item for item in outputs[1:] if isinstance(item, tuple)), None)
    return [seen[i] for i in range(len(targets))], hidden_states


def _first_tensor(output):
    if isinstance(output, (tuple, list)):
        output = output[0]
    elif hasattr(output, "last_hidden_state"):
        output = output.last_hidden_state
    return output.detach() if isinstance(output, torch.Tensor) else output


def _close(value, reference, rtol):
    if not isinstance(reference, torch.Tensor) or value.shape != reference.shape:
        shape = tuple(reference.shape) if isinstance(reference, torch.Tensor) else type(reference).__name__
        return False, f"shape {tuple(value.shape)} vs the model's {shape}"
    error = float((value - reference).abs().max()) / (float(reference.abs().max()) + 1e-12)
    return error <= rtol, f"max rel. difference {error:.2e}"


def _check_hidden_states(result, index: int, count: int, own_input, own_output, hidden_states, rtol) -> None:
    """The block is the model's layer ``index``: its input is ``hidden_states[index]`` (the usual convention), or
    its output is (families that record each block's output, such as Mamba)."""
    if hidden_states is None or len(hidden_states) <= index:
        return
    reported = hidden_states[index]
    window = token_window(own_input, reported) if isinstance(reported, torch.Tensor) else None
    if window is not None and _close(own_input[:, window], reported, rtol)[0]:
        where = "" if window == slice(None) else (
            f" (tokens {window.start or 0}.. of {own_input.shape[1]}: the model reports a window of the state)")
        result.add(f"layer {index}: is the model's layer {index}", True, f"its input is hidden_states[{index}]{where}")
    elif _close(own_output, hidden_states[index], rtol)[0]:
        result.add(f"layer {index}: is the model's layer {index}", True,
                   f"its output is hidden_states[{index}] (this family records each block's output)")
    elif index + 1 < count:  # the last layer's entry may be final-normed: only the others must match
        result.add(f"layer {index}: is the model's layer {index}", False,
                   f"neither its input nor its output is hidden_states[{index}]: the adapter's blocks are not the "
                   "layers the model reports (register the right block_class)")


def _check_derivatives(result: AdapterCheckResult, looped, label: str) -> None:
    looped = looped.detached()
    x = looped.x0
    generator = torch.Generator(device=x.device).manual_seed(0)
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    try:
        Jv = jvp(looped, x, v)
        JTu = vjp(looped, x, u)
    except Exception as error:  # noqa: BLE001 - reported as a failed check with the reason
        result.add(f"{label}: jvp/vjp run", False, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
        return
    # Some families compute norms and softmax in float32 even for float64 inputs (Llama's RMSNorm upcasts to,
    # then returns from, float32), so the tolerances are float32-level: a wrong Jacobian is off by O(1). ReLU
    # families (T5) have kinks: a pre-activation near 0 makes the differences converge only like the step (5e-3
    # at the smallest step on a tiny T5 whose jvp equals the dense autograd Jacobian to 1e-8), hence 1e-2. The
    # steps are relative to the whole state: where a few tokens are far smaller than the rest (the CLS and
    # distillation tokens of DeiT / BEiT), only the smallest step resolves them (DeiT: 6e-10 at 1e-7).
    errors = []
    for relative_step in (1e-3, 1e-5, 1e-7):
        h = relative_step * float(x.norm()) / max(float(v.norm()), 1e-30)
        with torch.no_grad():
            finite_difference = (looped(x + h * v) - looped(x - h * v)) / (2 * h)
        errors.append(float((Jv - finite_difference).norm() / Jv.norm().clamp_min(1e-30)))
    error = min(errors)
    result.add(f"{label}: jvp = finite differences (float64)", error <= 1e-2, f"rel. error {error:.1e}")
    left, right = float((u * Jv).sum()), float((JTu * v).sum())
    adjoint = abs(left - right) / max(abs(left), abs(right), 1e-30)
    result.add(f"{label}: adjoint test <u, Jv> = <J^T u, v>", adjoint <= 1e-5, f"rel. difference {adjoint:.1e}")
