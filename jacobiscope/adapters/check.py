"""`check_adapter`: a conformance check anyone can run on a new model family (scikit-learn's check_estimator,
for looped blocks)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import JacobiscopeError
from ..linalg.operators import jvp, vjp
from .inputs import prepare_inputs
from .looped import build_maps, prepare_model
from .spec import find_blocks

__all__ = ["check_adapter", "AdapterCheckResult", "AdapterCheckError"]


class AdapterCheckError(JacobiscopeError, AssertionError):
    """`check_adapter` found a check that fails; the message lists them."""


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

    Checks, per layer (default: the first and the middle one): the captured ``x0`` is the model's own
    ``hidden_states[i]``; one step of the block-mode map takes ``hidden_states[i]`` to ``hidden_states[i+1]``
    (skipped for the last layer, whose output some families normalize); the map is deterministic; in float64 the
    jvp matches central finite differences and the jvp/vjp pair passes the adjoint test ``<u, J v> = <J^T u, v>``;
    the attention mode (when the adapter has one) keeps the shape and stays finite.

    Returns an `AdapterCheckResult`; raises `AdapterCheckError` listing the failures unless
    ``raise_on_failure=False``.
    """
    prepared = prepare_model(model)
    try:
        path, blocks, spec = find_blocks(model)
        result = AdapterCheckResult(getattr(model, "name_or_path", "") or type(model).__name__,
                                    spec.name if spec is not None else "generic")
        result.add("blocks found", True, f"{len(blocks)} x {type(blocks[0]).__name__} at '{path}'")
        model_inputs = prepare_inputs(model, _default_inputs(model) if inputs is None else inputs)
        if layers is None:
            layers = sorted({0, len(blocks) // 2})
        kwargs = dict(model_inputs.kwargs)
        device = next(model.parameters()).device
        kwargs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        with torch.no_grad():
            outputs = model(**kwargs, output_hidden_states=True)
        hidden_states = outputs.hidden_states
        for layer in layers:
            looped = build_maps(prepared, model_inputs, [layer], "block", None, None)[0]
            index = looped.meta["layer"]
            x0 = looped.x0
            scale = float(hidden_states[index].abs().max()) + 1e-12
            error = float((x0 - hidden_states[index]).abs().max()) / scale
            result.add(f"layer {index}: x0 is hidden_states[{index}]", error <= rtol, f"max rel. difference {error:.2e}")
            with torch.no_grad():
                stepped = looped(x0)
                again = looped(x0)
            if index + 1 < len(blocks):
                target = hidden_states[index + 1]
                error = float((stepped - target).abs().max()) / (float(target.abs().max()) + 1e-12)
                result.add(f"layer {index}: step(hidden_states[{index}]) = hidden_states[{index + 1}]", error <= rtol,
                           f"max rel. difference {error:.2e}")
            result.add(f"layer {index}: deterministic", bool(torch.equal(stepped, again)),
                       "two calls agree" if torch.equal(stepped, again) else "two calls differ (dropout or a stateful cache?)")
            _check_derivatives(result, looped.to(dtype=torch.float64), f"layer {index} block")
            if "attention" in modes and spec is not None and spec.attention is not None:
                attention_map = build_maps(prepared, model_inputs, [layer], "attention", None, None)[0]
                with torch.no_grad():
                    out = attention_map(attention_map.x0)
                ok = out.shape == attention_map.x0.shape and bool(torch.isfinite(out).all())
                result.add(f"layer {index}: attention mode", ok, f"state {tuple(out.shape)}, finite={bool(torch.isfinite(out).all())}")
                _check_derivatives(result, attention_map.to(dtype=torch.float64), f"layer {index} attention")
    finally:
        prepared.restore()
    if raise_on_failure and not result.passed:
        raise AdapterCheckError(str(result))
    return result


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
    # then returns from, float32), so the tolerances are float32-level: a wrong Jacobian is off by O(1).
    errors = []
    for relative_step in (1e-3, 1e-5):
        h = relative_step * float(x.norm()) / max(float(v.norm()), 1e-30)
        with torch.no_grad():
            finite_difference = (looped(x + h * v) - looped(x - h * v)) / (2 * h)
        errors.append(float((Jv - finite_difference).norm() / Jv.norm().clamp_min(1e-30)))
    error = min(errors)
    result.add(f"{label}: jvp = finite differences (float64)", error <= 1e-3, f"rel. error {error:.1e}")
    left, right = float((u * Jv).sum()), float((JTu * v).sum())
    adjoint = abs(left - right) / max(abs(left), abs(right), 1e-30)
    result.add(f"{label}: adjoint test <u, Jv> = <J^T u, v>", adjoint <= 1e-5, f"rel. difference {adjoint:.1e}")
