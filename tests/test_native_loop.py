"""native_loop: a looped model's own iteration as a map — ALBERT's shared layer group (a family spec, data only) and
a recurrent-depth model of Huginn's shape defined here (the public protocol), each checked against the model's own
run, a dense Jacobian, and analyze's default loop mode."""
import pytest
import torch
import transformers
from torch import nn

import jacobiscope
from jacobiscope.adapters import AdapterError
from conftest import check_loop_depth_readout


def _albert(groups=1, layers=5):
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=layers,
                                       num_attention_heads=2, intermediate_size=24, num_hidden_groups=groups)
    return transformers.AlbertModel(config).eval()


def _own_iterates(model, module, kwargs):
    """The outputs of every call of ``module`` during the model's own forward (forward hooks)."""
    outputs = []
    handle = module.register_forward_hook(lambda _, __, out: outputs.append(
        (out[0] if isinstance(out, (tuple, list)) else out).detach().clone()))
    with torch.no_grad():
        model(**kwargs)
    handle.remove()
    return outputs


def test_albert_iterates_are_the_models_own_states():
    model = _albert()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])}
    looped = jacobiscope.native_loop(model, kwargs)
    assert looped.meta["loops"] == 5 and looped.meta["recurrence"] == "loop"
    own = _own_iterates(model, model.encoder.albert_layer_groups[0], kwargs)
    states = looped.trajectory(looped.x0, 12)
    assert len(own) == 5
    for t, state in enumerate(own, start=1):
        assert torch.allclose(states[t], state, atol=1e-5), t
    assert torch.isfinite(states).all()  # and beyond the trained depth
    # The Jacobian of one iteration: matrix-free against the dense autograd matrix.
    x = looped.x0.double()
    double = looped.to(torch.float64)
    dense = torch.autograd.functional.jacobian(double.step, x).reshape(x.numel(), x.numel())
    sigma = jacobiscope.spectral_norm(double, x, tol=1e-10).value
    assert float(sigma) == pytest.approx(float(torch.linalg.matrix_norm(dense, ord=2)), rel=1e-6)


def test_albert_recurrences_are_listed_and_a_grouped_albert_is_refused():
    assert jacobiscope.list_recurrences("albert") == ["loop"]
    assert jacobiscope.list_recurrences("gpt2") == []
    with pytest.raises(AdapterError, match="no recurrence 'H' — it offers loop"):
        jacobiscope.native_loop(_albert(), torch.tensor([[1, 2, 3]]), recurrence="H")
    with pytest.raises(AdapterError, match="num_hidden_groups = 1"):
        jacobiscope.native_loop(_albert(groups=5), torch.tensor([[1, 2, 3]]))
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=20))
    with pytest.raises(AdapterError, match="declares no recurrence"):
        jacobiscope.native_loop(gpt2, torch.tensor([[1, 2]]))


def test_analyze_measures_a_looped_family_through_its_own_loop_by_default():
    model = _albert()
    report = jacobiscope.analyze(model, torch.tensor([[3, 5, 7, 9]]), loops=8, progress=False,
                                 diagnostics=["lyapunov"])
    (row,) = report.rows
    assert row.mode == "loop" and report.provenance["adapter"] == "native recurrence 'loop'"
    looped = jacobiscope.native_loop(model, {"input_ids": torch.tensor([[3, 5, 7, 9]])})
    expected = jacobiscope.lyapunov_spectrum(looped, looped.x0, steps=8, k=4).exponents
    assert row.lyapunov["exponents"] == pytest.approx(expected.tolist(), abs=1e-6)
    blocks = jacobiscope.analyze(model, torch.tensor([[3, 5, 7, 9]]), mode="block", loops=4, progress=False,
                                 diagnostics=["lyapunov"])
    assert blocks.rows[0].mode == "block"
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=20))
    with pytest.raises(jacobiscope.ArgumentError, match="recurrence of its own"):
        jacobiscope.analyze(gpt2, torch.tensor([[1, 2]]), mode="loop", loops=2, progress=False)


class Block(nn.Module):
    """Pre-norm attention and MLP, written out (torch's fused encoder layer has no forward-mode AD)."""

    def __init__(self, width):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.out(weights @ v)
        return x + self.mlp(self.norm2(x))


class TinyRecurrentDepth(nn.Module):
    """A recurrent-depth language model of Huginn's shape: prelude P, core R applied r times with the input injected
    at every iteration (s <- R(adapter([s, e]))), coda C. It follows jacobiscope's public protocol without importing
    jacobiscope: a class attribute naming its recurrences and a method returning plain torch objects."""

    jacobiscope_recurrences = ("core",)

    def __init__(self, vocab=30, width=8, iterations=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.prelude = Block(width)
        self.adapter = nn.Linear(2 * width, width)
        self.core = Block(width)
        self.coda = nn.Linear(width, vocab)
        self.iterations = iterations

    def initial_state(self, embedded):
        return torch.zeros_like(embedded)

    def forward(self, input_ids, iterations=None):
        injected = self.prelude(self.embed(input_ids))
        state = self.initial_state(injected)
        with torch.no_grad():  # as Huginn: the early iterations without a graph
            for _ in range((iterations or self.iterations) - 1):
                state = self.core(self.adapter(torch.cat([state, injected], -1)))
        state = self.core(self.adapter(torch.cat([state, injected], -1)))
        return self.coda(state)

    def jacobiscope_recurrence(self, name, input_ids):
        injected = self.prelude(self.embed(input_ids)).detach()
        return {"step": lambda s: self.core(self.adapter(torch.cat([s, injected], -1))),
                "x0": self.initial_state(injected), "loops": self.iterations, "readout": self.coda,
                "description": "s <- R(adapter([s, e])), e from the prelude"}


def test_a_recurrent_depth_model_through_the_public_protocol():
    torch.manual_seed(0)
    model = TinyRecurrentDepth().eval()
    input_ids = torch.tensor([[1, 4, 9, 16, 25]])
    assert jacobiscope.list_recurrences(model) == ["core"]
    looped = jacobiscope.native_loop(model, {"input_ids": input_ids})
    states = looped.trajectory(looped.x0, 10)
    own = _own_iterates(model, model.core, {"input_ids": input_ids})
    assert len(own) == 6
    for t, state in enumerate(own, start=1):
        assert torch.allclose(states[t], state, atol=1e-5), t
    # The model's own no_grad loop does not get in the way: the map's Jacobian is the dense one.
    x = states[3].double()
    double = looped.to(torch.float64)
    model.double()
    dense = torch.autograd.functional.jacobian(lambda s: model.core(model.adapter(torch.cat(
        [s, model.prelude(model.embed(input_ids)).detach()], -1))), x).reshape(x.numel(), x.numel())
    sigma = jacobiscope.spectral_norm(double, x, tol=1e-10).value
    assert float(sigma) == pytest.approx(float(torch.linalg.matrix_norm(dense, ord=2)), rel=1e-6)
    report = jacobiscope.analyze(model.float(), {"input_ids": input_ids}, loops=12, progress=False,
                                 diagnostics=["lyapunov", "loop_depth"])
    assert report.rows[0].mode == "loop" and report.rows[0].regime in jacobiscope.dynamics.REGIMES
    # The loop-depth sweep reads the coda at every loop: at the trained depth it is the model's own output.
    sweep = report.rows[0].diagnostic("loop_depth")
    assert sweep.reference_loop == 6 and sweep.kl[6] == pytest.approx(0.0, abs=1e-9)
    with torch.no_grad():
        own = torch.log_softmax(model(input_ids).double(), -1)
        third = torch.log_softmax(model.coda(states[3].float()).double(), -1)
    assert sweep.kl[3] == pytest.approx(float((own.exp() * (own - third)).sum(-1).mean()), rel=1e-4)


def test_describe_prices_the_native_loop():
    model = _albert()
    (plan,) = jacobiscope.describe(model, torch.tensor([[3, 5, 7, 9]]), loops=8)
    assert plan.layer == 0 and plan.state_size == 4 * 12 and plan.estimated_seconds > 0


def test_albert_masked_lm_reads_out_through_its_mlm_head():
    """AlbertForMaskedLM keeps the shared group under ``albert.``: the spec's path resolves there too, and its MLM
    head (``predictions``) is the readout; a bare AlbertModel has none."""
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=5,
                                       num_attention_heads=2, intermediate_size=24)
    model = transformers.AlbertForMaskedLM(config).eval()
    kwargs = {"input_ids": torch.tensor([[3, 5, 7, 9, 11, 2]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])}
    looped = jacobiscope.native_loop(model, kwargs)
    own = _own_iterates(model, model.albert.encoder.albert_layer_groups[0], kwargs)
    states = looped.trajectory(looped.x0, 5)
    assert all(torch.allclose(states[t], state, atol=1e-5) for t, state in enumerate(own, start=1))
    check_loop_depth_readout(model, kwargs)
    assert "readout" not in jacobiscope.native_loop(_albert(), kwargs).meta
    with pytest.raises(AdapterError, match="num_hidden_groups = 1"):  # the spec's requirement still holds
        jacobiscope.native_loop(transformers.AlbertForMaskedLM(transformers.AlbertConfig(
            vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=4, num_attention_heads=2,
            intermediate_size=24, num_hidden_groups=2)), kwargs)


def test_list_recurrences_by_model_type_names_the_families_and_refuses_an_unknown_type():
    assert jacobiscope.list_recurrences("ouro") == ["loop"]
    assert jacobiscope.list_recurrences("huginn_raven") == ["loop"]
    assert jacobiscope.list_recurrences("hrm_text") == ["L", "H", "cycle"]
    assert jacobiscope.list_recurrences("llama") == []          # a known, non-looped type: nothing to loop
    with pytest.raises(jacobiscope.errors.AdapterError, match=r"'huginn'.*did you mean 'huginn_raven'"):
        jacobiscope.list_recurrences("huginn")
