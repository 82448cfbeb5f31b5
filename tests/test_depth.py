"""depth_dynamics against the dense Jacobians of a tiny GPT-2 stack (float64): each layer's norm, the QR exponents
of the product J_L ... J_1, and the per-token gains."""
import pytest
import torch
import transformers

import jacobiscope


def _layer_jacobians(model, input_ids):
    """Dense Jacobian of every layer at the hidden state entering it, each layer called with the arguments the
    model passed it (recorded by this test's own pre-hooks: the causal mask lives there)."""
    calls = {}
    handles = [block.register_forward_pre_hook(
        lambda module, args, kwargs, index=index: calls.setdefault(index, (args, kwargs)), with_kwargs=True)
        for index, block in enumerate(model.h)]
    with torch.no_grad():
        model(input_ids=input_ids, use_cache=False)
    for handle in handles:
        handle.remove()
    jacobians = []
    for index, block in enumerate(model.h):
        args, kwargs = calls[index]
        x = args[0].detach()

        def layer(state, block=block, args=args, kwargs=kwargs):
            out = block(state, *args[1:], **kwargs)
            return out[0] if isinstance(out, tuple) else out

        jacobians.append(torch.autograd.functional.jacobian(layer, x).reshape(x.numel(), x.numel()))
    return jacobians, calls[0][0][0].shape


def test_depth_dynamics_matches_the_dense_chain():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=8, n_layer=3, n_head=2, vocab_size=30, attn_implementation="eager")
    model = transformers.GPT2Model(config).double().eval()
    input_ids = torch.tensor([[3, 1, 4, 1, 5]])
    (depth,) = jacobiscope.depth_dynamics(model, input_ids, k=3, seed=0)
    jacobians, shape = _layer_jacobians(model, input_ids)
    for layer, dense in zip(depth.layers, jacobians):
        assert layer["spectral_norm"] == pytest.approx(float(torch.linalg.matrix_norm(dense, ord=2)), rel=1e-5)
    generator = torch.Generator().manual_seed(0)
    frame, _ = torch.linalg.qr(torch.randn(dense.shape[0], 3, generator=generator, dtype=torch.float64))
    chain = jacobians[2] @ jacobians[1] @ jacobians[0]
    _, r = torch.linalg.qr(chain @ frame)
    expected = (r.diagonal().abs().log() / 3).tolist()
    assert depth.exponents == pytest.approx(expected, abs=1e-8)
    tokens = shape[1]
    gains = []
    for token in range(tokens):
        direction = torch.zeros(shape, dtype=torch.float64)
        v = torch.randn(shape[-1], generator=generator, dtype=torch.float64)
        direction[0, token] = v / v.norm()
        gains.append(float((chain @ direction.reshape(-1)).norm()))
    assert depth.token_gain == pytest.approx(gains, rel=1e-8)
    # Causal attention: a nudge to the last token reaches only itself, to the first one every token.
    assert len(depth.token_gain) == 5 and all(g > 0 for g in depth.token_gain)
