"""Every registered diagnostic x every kind of map, each cell checked against an independent computation.

The kinds of map: a plain callable; a `LoopedMap` on ``[T, H]`` states; the same on ``[1, T, H]`` (the batch axis
of one a model's own loop keeps); a ``batch_dims=1`` map (the adapters' block layout, with a drive and readout that
insist on it); ``power(2)``; a model speaking the public recurrence protocol; a tiny GPT-2 block (block mode); a
tiny BERT attention (attention mode); a tiny ALBERT's own loop (native); and, under ``-m slow``, two inputs as one
state (``split=False``) and a batch of three inputs. The first six share a per-token contraction
``X_i -> a_i + c_i (X_i - a_i) M`` whose trajectory, exits and spectra are known in closed form; the model kinds
are checked against the model itself run with the state substituted by hooks (not the adapters' replay).

The references: ``||J||_2`` = largest singular value of the dense Jacobian (autograd), within Lanczos's stated
bound; eigenvalues = those of the dense Jacobian; Lyapunov exponents = QR of products of dense Jacobians from the
same start frame (and ``power(2)`` twice those of the map over twice the loops); clusters, energy, halting and the
loop-depth sweep recomputed from the reference trajectory; fixed points re-run from the same kicks with dense
spectral radii; the verdict converging on the contractions, the numbers it cites equal to the dense ones. Every
row's state norms are RMS per token. A newly registered diagnostic joins the matrix by itself and fails until it
has a check here.
"""
import functools
import math
from dataclasses import dataclass, field

import pytest
import torch
import transformers
from torch import nn

import jacobiscope
from conftest import autograd_jacobian
from hf_models import model_block_function
from jacobiscope.diagnostics import list_diagnostics, measure

F64 = torch.float64
T, H, LOOPS, MODEL_LOOPS = 4, 4, 12, 6
# 12 loops of the toy's 0.6 contraction leave a return residual ~1e-3: settled at 1e-2, not at the default 1e-4
OPTIONS = {"halting_thresholds": [1e-2, 1e-3, 1e-4], "basin_starts": 4, "attractor_starts": 4,
           "attractor_settle_rtol": 1e-2}
SETTINGS = dict(k=4, eigen_k=4, eigen_restarts=12, spectral_samples=2, seed=0)


# ---------------------------------------------------------------- the per-token contraction, in closed form
class Toy:
    """``X_i -> a_i + c_i (X_i - a_i) M`` per token ``i``; ``M`` symmetric, eigenvalues 1, .4, .3, .2, so the
    Jacobian's eigenvalues are ``c_i s_j`` (top 0.6, 0.3, 0.25, 0.24) and ``||J||_2 = rho = 0.6``."""

    def __init__(self):
        generator = torch.Generator().manual_seed(7)
        self.rates = torch.tensor([0.2, 0.25, 0.3, 0.6], dtype=F64).view(T, 1)
        q, _ = torch.linalg.qr(torch.randn(H, H, generator=generator, dtype=F64))
        self.mix = q @ torch.diag(torch.tensor([1.0, 0.4, 0.3, 0.2], dtype=F64)) @ q.T
        self.targets = torch.randn(T, H, generator=generator, dtype=F64) + 2.0
        self.head = torch.randn(H, 5, generator=generator, dtype=F64)
        self.x0 = torch.randn(T, H, generator=generator, dtype=F64)

    def step(self, x):
        return self.targets + self.rates * ((x - self.targets) @ self.mix)

    def drive(self, x):
        return self.step(x) - x

    def strict_drive(self, x):
        batch, tokens, features = x.shape  # written for the map's own layout [B, T, H], as HF attention code is
        return self.drive(x)

    def readout(self, x):
        return x @ self.head

    def strict_readout(self, x):
        batch, tokens, features = x.shape  # the map's own layout, as a model's head would check it
        return self.readout(x)

    def closed_form(self, loops):
        """The trajectory ``x_t = a + c^t (x_0 - a) M^t`` (not by iterating the step)."""
        return torch.stack([self.targets + self.rates ** t * ((self.x0 - self.targets)
                                                             @ torch.linalg.matrix_power(self.mix, t))
                            for t in range(loops + 1)])


TOY = Toy()


class ToyProtocolModel(nn.Module):
    """A model speaking the public protocol (no jacobiscope import needed): state [1, T, H], a readout, a drive."""

    jacobiscope_recurrences = ("core",)

    def jacobiscope_recurrence(self, name, input_ids):
        return {"step": TOY.step, "x0": TOY.x0.unsqueeze(0), "loops": 5, "readout": TOY.readout, "drive": TOY.drive}


def tiny(cls, config):
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    return cls(config).to(F64).eval()


def gpt2():
    return tiny(transformers.GPT2Model, transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=60,
                                                                bos_token_id=0, eos_token_id=0))


def ids(batch=1, length=4, seed=1):
    return torch.randint(2, 60, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the cases
@dataclass
class Case:
    """One measured row and what it is checked against: ``step`` (the reference map on ``x0``'s layout), the
    readout and drive (None: the map has none), the tokens a state holds, the trained depth."""

    row: object
    step: object
    x0: torch.Tensor
    loops: int
    tokens: int
    readout: object = None
    drive: object = None
    trained: int | None = None
    toy: bool = False  # the per-token contraction: its known answers hold too
    examples: int = 1  # how many inputs one state holds (a whole batch as one input: no token clusters)
    extra: dict = field(default_factory=dict)


def measured(looped, x0, loops, diagnostics=None):
    diagnostics = diagnostics or list_diagnostics()
    options = {key: value for key, value in OPTIONS.items()
               if (key.startswith("halting") and "halting" in diagnostics) or (key.startswith("basin") and
                                                                               "fixed_points" in diagnostics)
               or (key.startswith("attractor") and "attractors" in diagnostics)}
    return measure(looped, x0, loops=loops, diagnostics=diagnostics, options=options, **SETTINGS)


def toy_case(looped, x0, readout=True, drive=True, trained=None):
    return Case(measured(looped, x0, LOOPS), TOY.step, x0, LOOPS, T, TOY.readout if readout else None,
                TOY.drive if drive else None, trained, toy=True)


def toy_map(x0, readout=TOY.readout, **kwargs):
    looped = jacobiscope.LoopedMap(TOY.step, drive=kwargs.pop("drive", TOY.drive), x0=x0, **kwargs)
    looped.info.readout = readout
    return looped


def model_case(looped, model, kwargs, module, readout=None, drive=None, trained=None, tokens=4):
    """A model's map; its reference is the model's own forward with the state substituted at ``module``."""
    x0 = looped.x0.detach().clone()
    return Case(measured(looped, x0, MODEL_LOOPS), model_block_function(model, kwargs, module), x0, MODEL_LOOPS, tokens, readout,
                drive, trained)


def build_callable():
    return [toy_case(TOY.step, TOY.x0, readout=False, drive=False)]


def build_tokens():
    return [toy_case(toy_map(TOY.x0), TOY.x0)]


def build_batch_of_one():
    return [toy_case(toy_map(TOY.x0[None]), TOY.x0[None])]


def build_batch_dims():
    # no x0 on the map: measure's x0 alone says the layout (a drive once got the whole trajectory at once then)
    return [toy_case(toy_map(None, TOY.strict_readout, batch_dims=1, drive=TOY.strict_drive), TOY.x0[None])]


def build_power():
    case = Case(measured(toy_map(TOY.x0).power(2), TOY.x0, LOOPS), lambda x: TOY.step(TOY.step(x)), TOY.x0, LOOPS,
                T, TOY.readout, toy=True)
    case.extra["single"] = measured(toy_map(TOY.x0), TOY.x0, 2 * LOOPS, ["spectral_norm", "lyapunov"])
    return [case]


def build_protocol():
    looped = jacobiscope.native_loop(ToyProtocolModel(), {"input_ids": torch.tensor([[1, 2, 3, 4]])})
    return [toy_case(looped, looped.x0, trained=5)]


def build_block():
    model, inputs = gpt2(), ids()
    with jacobiscope.adapters.map_source(model, inputs, mode="block", layers=[1]) as source:
        return [model_case(source[0].maps[0], model, source[0].inputs, model.h[1])]


def build_attention():
    config = transformers.BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                     vocab_size=60)
    model, inputs = tiny(transformers.BertModel, config), ids()
    attention = model.encoder.layer[0].attention
    with jacobiscope.adapters.map_source(model, inputs, mode="attention", layers=[0], eta=1.0) as source:
        heads = model_block_function(model, source[0].inputs, attention.self)
        return [model_case(source[0].maps[0], model, source[0].inputs, attention,
                           drive=lambda x: attention.output.dense(heads(x)))]


def albert(length=4):
    config = transformers.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                                       num_attention_heads=2, intermediate_size=32)
    return tiny(transformers.AlbertForMaskedLM, config), ids(length=length)


def build_native():
    model, inputs = albert()
    with jacobiscope.adapters.map_source(model, inputs) as source:
        case = model_case(source[0].maps[0], model, source[0].inputs, model.albert.encoder.albert_layer_groups[0],
                          readout=model.predictions, trained=3)
        case.extra["logits"] = model(**source[0].inputs).logits  # the model's own output at its configured depth
        return [case]


def build_joint():
    """Two inputs as one state ([2, T, H], ``split=False``): one trajectory of 2 x 4 tokens."""
    model, _ = albert()
    with jacobiscope.adapters.map_source(model, ids(batch=2, seed=3), split=False) as source:
        case = model_case(source[0].maps[0], model, source[0].inputs, model.albert.encoder.albert_layer_groups[0],
                          readout=model.predictions, trained=3, tokens=8)
        case.examples = 2
        return [case]


def build_batch():
    model, inputs = gpt2(), ids(batch=3, length=4, seed=5)
    with jacobiscope.adapters.map_source(model, inputs, mode="block", layers=[0]) as source:
        return [model_case(item.maps[0], model, item.inputs, model.h[0]) for item in source]


#: kind -> (builder, marks): the model kinds cost about a second of jvps each, the batch three
KINDS = {"callable": (build_callable, ()), "tokens": (build_tokens, ()), "batch_of_one": (build_batch_of_one, ()),
         "batch_dims": (build_batch_dims, ()), "power": (build_power, ()), "protocol": (build_protocol, ()),
         "native": (build_native, ()), "block": (build_block, ()), "attention": (build_attention, ()),
         "joint": (build_joint, (pytest.mark.slow,)),
         "batch": (build_batch, (pytest.mark.slow,))}


@functools.lru_cache(maxsize=None)
def cases(kind):
    return KINDS[kind][0]()


@functools.lru_cache(maxsize=None)
def reference(kind, index):
    """The reference trajectory (the reference map iterated from x0) and the dense Jacobian at each state."""
    case = cases(kind)[index]
    with torch.no_grad():
        states = [case.x0]
        for _ in range(case.loops):
            states.append(case.step(states[-1]))
    return states, [autograd_jacobian(case.step, state) for state in states]


# ---------------------------------------------------------------- one check per diagnostic
def check_spectral_norm(case, result, states, jacobians):
    assert result.samples and result.samples[-1]["loop"] == case.loops
    for sample in result.samples:
        within_lanczos_bound(sample, float(torch.linalg.svdvals(jacobians[sample["loop"]])[0]))
    if "single" in case.extra:  # ||J(F^2)(x)|| = ||J(F)(F(x)) J(F)(x)||: the contraction's 0.6^2
        assert result.samples[0]["value"] == pytest.approx(0.36, rel=1e-6)
    elif case.toy:
        assert result.samples[0]["value"] == pytest.approx(0.6, rel=1e-6)


def within_lanczos_bound(sample, dense):
    """A Lanczos Ritz value is a lower bound of sigma_max, and sigma_max^2 lies within ``tolerance * s^2`` of s^2
    (its documented bound)."""
    value, tolerance = sample["value"], sample["tolerance"]
    assert value <= dense * (1 + 1e-12) and dense <= value * math.sqrt(1 + tolerance) and tolerance < 1e-3


def check_eigenvalues(case, result, states, jacobians):
    dense = torch.linalg.eigvals(jacobians[result.loop])
    found = torch.tensor([complex(*pair) for pair in result.values])
    scale = float(dense.abs().max())
    assert result.loop == case.loops and len(found) == 4
    assert sorted(found.abs().tolist(), reverse=True) == pytest.approx(
        sorted(dense.abs().tolist(), reverse=True)[:4], abs=1e-4 * scale)
    for value in found:  # each one an eigenvalue of the dense Jacobian
        assert float((dense - value).abs().min()) < 1e-4 * scale
    if case.toy:  # the contraction's own spectrum c_i s_j (squared for F^2)
        power = 2 if "single" in case.extra else 1
        expected = [value ** power for value in (0.6, 0.3, 0.25, 0.24)]
        assert sorted(found.abs().tolist(), reverse=True) == pytest.approx(expected, abs=1e-6)


def dense_lyapunov(jacobians, k, loops):
    """QR of the products of dense Jacobians from the same random start frame measure draws (seed 0)."""
    size = jacobians[0].shape[0]
    generator = torch.Generator().manual_seed(0)
    frame, _ = torch.linalg.qr(torch.randn(1, size, k, generator=generator, dtype=F64)[0])
    logs = []
    for jacobian in jacobians[:loops]:
        frame, r = torch.linalg.qr(jacobian @ frame)
        logs.append(r.diagonal().abs().log())
    logs = torch.stack(logs)
    # jacobiscope's convention: the exponents sorted by their final estimate, each history column carried along
    order = torch.argsort(logs.mean(0), descending=True)
    return logs.mean(0)[order], (logs.cumsum(0) / torch.arange(1, loops + 1, dtype=F64).view(-1, 1))[:, order]


def check_lyapunov(case, result, states, jacobians):
    exponents, history = dense_lyapunov(jacobians, 4, case.loops)
    assert result.exponents == pytest.approx(exponents.tolist(), abs=1e-8)
    assert [step[0] for step in result.history] == pytest.approx(history[:, 0].tolist(), abs=1e-8)
    if "single" in case.extra:  # F^2 over L loops is F over 2L loops: twice the exponents, exactly
        single = case.extra["single"].lyapunov["exponents"]
        assert result.exponents == pytest.approx([2 * value for value in single], abs=1e-9)
    elif case.toy:  # the local exponent at the last loop: the frame has turned onto the top direction by then
        local = case.loops * result.history[-1][0] - (case.loops - 1) * result.history[-2][0]
        assert local == pytest.approx(math.log(0.6), abs=1e-3)


def token_matrix(state, tokens):
    return state.reshape(tokens, -1)


def check_clusters(case, result, states, jacobians):
    if case.examples > 1:
        assert result is None  # tokens of different inputs are not one cloud: no order parameters
        return
    top, effective, counts = [], [], []
    for state in states:
        x = token_matrix(state, case.tokens)
        x = x / x.norm(dim=1, keepdim=True)
        spectrum = torch.linalg.eigvalsh(x.T @ x / x.shape[0])
        top.append(float(spectrum[-1]))
        effective.append(float(1 / (spectrum ** 2).sum()))
        linked = (x @ x.T).abs() > 0.99
        label = list(range(x.shape[0]))
        for _ in range(x.shape[0]):  # connected components by repeated min-label relaxation
            label = [min(label[j] for j in range(x.shape[0]) if linked[i, j]) for i in range(x.shape[0])]
        counts.append(len(set(label)))
    assert result.top_eigenvalue == pytest.approx(top, rel=1e-9)
    assert result.effective_clusters == pytest.approx(effective, rel=1e-9)
    assert result.cluster_count == counts


def check_energy(case, result, states, jacobians):
    if case.drive is None:
        assert result is None  # no drive: nothing to measure
        return
    with torch.no_grad():
        expected = [float(-(state * case.drive(state)).sum()) for state in states]
    assert result.values == pytest.approx(expected, rel=1e-9)


def kicked_starts(case, count):
    """The seeded kicks fixed_points and attractors draw (seed 0, noise 0.1 x rms(x0)), written out here."""
    generator, scale = torch.Generator().manual_seed(0), float(case.x0.pow(2).mean().sqrt())
    return [case.x0 + 0.1 * scale * torch.randn(case.x0.shape, generator=generator, dtype=F64) for _ in range(count)]


def check_fixed_points(case, result, states, jacobians):
    """The same kicks (seeded), each start run the full loops through the reference map, greedy clustering at
    1e-2, the dense spectral radius at each end state."""
    starts = OPTIONS["basin_starts"]
    ends = []
    with torch.no_grad():
        for x in kicked_starts(case, starts):
            for _ in range(case.loops):
                previous, x = x, case.step(x)
            ends.append((x, float((x - previous).norm() / x.norm())))
    clusters = []
    for index, (end, _) in enumerate(ends):
        home = next((members for members in clusters if float((end - ends[members[0]][0]).pow(2).mean().sqrt())
                     <= 1e-2 * float(ends[members[0]][0].pow(2).mean().sqrt())), None)
        home.append(index) if home is not None else clusters.append([index])
    clusters.sort(key=len, reverse=True)
    assert len(result.basins) == len(clusters) and result.starts == starts
    for basin, members in zip(result.basins, clusters):
        end, step = ends[members[0]]
        assert basin["fraction"] == len(members) / starts and basin["step"] == pytest.approx(step, rel=1e-6)
        assert basin["settled"] == (step < 1e-4)
        radius = float(torch.linalg.eigvals(autograd_jacobian(case.step, end)).abs().max())
        assert basin["spectral_radius"] == pytest.approx(radius, rel=1e-4)
        distance = float((end - states[-1]).pow(2).mean().sqrt() / end.pow(2).mean().sqrt())
        assert basin["distance"] == pytest.approx(distance, rel=1e-6, abs=1e-12)
    if case.toy:  # one contraction, one fixed point, spectral radius 0.6 (0.36 for F^2) everywhere
        radius = 0.36 if "single" in case.extra else 0.6
        assert len(result.basins) == 1 and result.basins[0]["spectral_radius"] == pytest.approx(radius, rel=1e-6)


def check_attractors(case, result, states, jacobians):
    """The same kicks (seeded), each start run the full loops through the reference map, its period found by
    iterating on (smallest p <= 8 returning within the settle tolerance), grouped by period and orbit distance 1e-2; the Floquet
    radius from the dense Jacobian of F^p at the point; the unperturbed run's end state marked as its own."""
    starts = OPTIONS["attractor_starts"]
    ends = []
    with torch.no_grad():
        for x in kicked_starts(case, starts):
            for _ in range(case.loops):
                x = case.step(x)
            orbit, y, period = [x], x, 0
            for p in range(1, 9):
                y = case.step(y)
                if float((y - x).norm() / x.norm()) <= OPTIONS["attractor_settle_rtol"]:
                    period = p
                    break
                orbit.append(y)
            ends.append((x, period, orbit if period else [x]))
    groups = []
    for index, (end, period, _) in enumerate(ends):
        home = next((g for g in groups if ends[g[0]][1] == period and min(
            float((end - point).pow(2).mean().sqrt()) for point in ends[g[0]][2])
            <= 1e-2 * float(ends[g[0]][0].pow(2).mean().sqrt())), None)
        home.append(index) if home is not None else groups.append([index])
    groups.sort(key=lambda g: (-len(g), min(g)))
    assert result.starts == starts and len(result.attractors) == len(groups)
    for attractor, members in zip(result.attractors, groups):
        period = ends[members[0]][1]
        assert attractor["starts"] == len(members) and attractor["period"] == period
        assert attractor["fraction"] == len(members) / starts
        assert attractor["interval"][0] <= attractor["fraction"] <= attractor["interval"][1]
        if period:
            with torch.no_grad():
                point = min((ends[i] for i in members), key=lambda e: float((case.step(e[0]) - e[0]).norm()))[0] \
                    if period == 1 else ends[members[0]][0]
            step_p = (lambda x: case.step(case.step(x))) if period == 2 else case.step
            radius = float(torch.linalg.eigvals(autograd_jacobian(step_p, point)).abs().max())
            assert attractor["spectral_radius"] == pytest.approx(radius, rel=1e-3)
    if case.toy:  # one contraction: one fixed point, the one the unperturbed run reaches, radius 0.6 (0.36 for F^2)
        radius = 0.36 if "single" in case.extra else 0.6
        (only,) = result.attractors
        assert only["kind"] == "fixed point" and only["own"] and only["spectral_radius"] == pytest.approx(radius,
                                                                                                          rel=1e-6)


def expected_halting(case, states):
    rows = torch.stack([token_matrix(state, case.tokens) for state in states])
    change = (rows[1:] - rows[:-1]).norm(dim=-1) / rows[:-1].norm(dim=-1)
    with torch.no_grad():
        outputs = [case.readout(state).argmax(-1).reshape(-1) for state in states] if case.readout else None
    rules = []
    for threshold in OPTIONS["halting_thresholds"]:
        exits = []
        for token in range(case.tokens):
            below = [t for t in range(case.loops) if change[t, token] < threshold]
            exits.append(below[0] + 1 if below else case.loops)
        if outputs is not None:
            agree = [bool(outputs[e][i] == outputs[-1][i]) for i, e in enumerate(exits)]
        else:
            agree = [float((rows[e, i] - rows[-1, i]).norm()) <= 1e-2 * float(rows[-1, i].norm())
                     for i, e in enumerate(exits)]
        rules.append((exits, sum(agree) / case.tokens))
    return change, rules


def check_halting(case, result, states, jacobians):
    change, rules = expected_halting(case, states)
    assert result.tokens == case.tokens
    assert result.agreement_by == ("readout" if case.readout else "state")
    assert result.max_change == pytest.approx(change.max(dim=1).values.tolist(), rel=1e-6)
    for rule, (exits, agreement) in zip(result.rules, rules):
        assert rule["exits"] == exits and rule["agreement"] == pytest.approx(agreement)
        assert rule["loops_saved"] == pytest.approx(1 - sum(exits) / (case.tokens * case.loops))
    if case.toy and "single" not in case.extra:  # the closed form: exits known without iterating the map
        closed = TOY.closed_form(case.loops)
        known = (closed[1:] - closed[:-1]).norm(dim=-1) / closed[:-1].norm(dim=-1)
        for rule in result.rules:
            exits = [next((t + 1 for t in range(case.loops) if known[t, i] < rule["threshold"]), case.loops)
                     for i in range(T)]
            assert rule["exits"] == exits
        assert result.rules[0]["exits"][0] < result.rules[0]["exits"][-1]  # the fast token exits first
        assert result.rules[-1]["agreement"] == 1.0  # a strict exit agrees with the full run
    # whole-input exit rules: the relative change of the whole state, and with a readout its successive KL,
    # entropy and confidence, recomputed here from the reference trajectory
    flat = torch.stack([state.reshape(-1) for state in states])
    residual = ((flat[1:] - flat[:-1]).norm(dim=-1) / flat[:-1].norm(dim=-1)).tolist()
    signals = {"residual": (residual, True)}
    if case.readout is not None:
        with torch.no_grad():
            logits = torch.stack([case.readout(state).to(F64).reshape(-1, case.readout(state).shape[-1])
                                  for state in states])
        log_p = torch.log_softmax(logits, -1)
        signals["kl"] = ((log_p.exp()[1:] * (log_p[1:] - log_p[:-1])).sum(-1).mean(-1).tolist(), True)
        signals["entropy"] = ((-(log_p.exp() * log_p).sum(-1).mean(-1))[1:].tolist(), True)
        signals["confidence"] = (log_p.exp().max(-1).values.mean(-1)[1:].tolist(), False)
    assert {entry["rule"] for entry in result.sequence_rules} == set(signals)
    for entry in result.sequence_rules:
        values, below = signals[entry["rule"]]
        expected = next((t for t, v in enumerate(values, 1) if (v < entry["threshold"] if below
                                                                 else v >= entry["threshold"])), case.loops)
        assert entry["exit"] == expected, entry


def check_loop_depth(case, result, states, jacobians):
    if case.readout is None:
        assert result is None and any("loop_depth needs a readout" in flag for flag in case.row.flags)
        return
    with torch.no_grad():
        logits = [case.readout(state).to(F64) for state in states]
    reference = case.trained if case.trained is not None and case.trained <= case.loops else case.loops
    target = torch.log_softmax(logits[reference], -1)
    kl = [float((target.exp() * (target - torch.log_softmax(value, -1))).sum(-1).mean()) for value in logits]
    agreement = [float((value.argmax(-1) == logits[reference].argmax(-1)).to(F64).mean()) for value in logits]
    assert result.reference_loop == reference
    assert result.kl == pytest.approx(kl, rel=1e-6, abs=1e-12) and result.agreement == agreement
    assert result.peak == max(agreement) and result.agreement[result.peak_loop] == result.peak
    if "logits" in case.extra:  # the state at the configured depth is the model's own: its output is the model's
        torch.testing.assert_close(logits[reference], case.extra["logits"], rtol=1e-9, atol=1e-9)


def check_regime(case, result, states, jacobians):
    """A contraction converges; on every map, the numbers the verdict cites are the dense ones."""
    from jacobiscope.dynamics.regime import Regime

    assert result.regime in {regime.value for regime in Regime} and isinstance(result.evidence, dict)
    if case.toy:
        assert result.regime == "converging", result.evidence.get("reason")
    evidence, last = result.evidence, jacobians[case.loops]
    if evidence.get("judged_on", "state") != "state":
        return  # judged on another state (the normalized one): its numbers are that map's, checked where it is
    if "spectral_norm" in evidence:
        (sample,) = [s for s in case.row.spectral_norm if s["loop"] == case.loops]
        assert evidence["spectral_norm"] == sample["value"]
        within_lanczos_bound(sample, float(torch.linalg.svdvals(last)[0]))
    if "spectral_radius" in evidence:
        assert evidence["spectral_radius"] == pytest.approx(float(torch.linalg.eigvals(last).abs().max()), rel=1e-4)
    if "max_lyapunov" in evidence:
        assert evidence["max_lyapunov"] == pytest.approx(float(dense_lyapunov(jacobians, 4, case.loops)[0][0]),
                                                         rel=1e-6)


def check_loop_lens(case, result, states, jacobians):
    """The readout statistics against a direct torch computation; ||J_t||_2, the spectral radius and the
    expansion rates of the seeded unit tangent against the dense Jacobians."""
    if case.readout is None:
        assert result is None and any("loop_lens needs a readout" in flag for flag in case.row.flags)
        return
    with torch.no_grad():
        logits = torch.stack([case.readout(state).to(F64) for state in states])
    log_p = torch.log_softmax(logits.reshape(len(states), -1, logits.shape[-1]), -1)
    entropy = [float(-(lp.exp() * lp).sum(-1).mean()) for lp in log_p]
    kl_final = [float((log_p[-1].exp() * (log_p[-1] - lp)).sum(-1).mean()) for lp in log_p]
    kl_prev = [None] + [float((log_p[t - 1].exp() * (log_p[t - 1] - log_p[t])).sum(-1).mean())
                        for t in range(1, len(states))]
    assert result.entropy == pytest.approx(entropy, rel=1e-6, abs=1e-12)
    assert result.kl_final == pytest.approx(kl_final, rel=1e-6, abs=1e-12)
    assert result.kl_prev[0] is None and result.kl_prev[1:] == pytest.approx(kl_prev[1:], rel=1e-6, abs=1e-12)
    argmax = log_p.argmax(-1)
    flips = [t for t in range(1, len(states)) if bool((argmax[t] != argmax[t - 1]).any())]
    assert result.flip_loop == (flips[-1] if flips else 0)
    tangent = torch.randn(states[0].numel(), generator=torch.Generator().manual_seed(SETTINGS["seed"]), dtype=F64)
    tangent = tangent / tangent.norm()
    for t, dense in enumerate(jacobians):  # lens_every=1: every loop sampled
        pushed = dense @ tangent.to(dense)
        assert result.expansion_rate[t] == pytest.approx(math.log(float(pushed.norm())), rel=1e-6, abs=1e-9), t
        tangent = pushed / pushed.norm()
        sigma = float(torch.linalg.svdvals(dense)[0])
        assert result.spectral_norm[t] <= sigma * (1 + 1e-9)  # a Ritz value: a lower bound, within tol 1e-3
        assert result.spectral_norm[t] == pytest.approx(sigma, rel=1e-3)
        assert result.spectral_radius[t] == pytest.approx(float(torch.linalg.eigvals(dense).abs().max()), rel=1e-4)


def check_depth_safety(case, result, states, jacobians):
    """The forecast against dense Jacobian powers at the trained-depth state: ``D(m) = ||sum_k J^k delta|| /
    ||x_T||`` with ``delta`` the last step up to the trained depth; the measured displacement from the reference
    trajectory; a contraction settles."""
    trained = case.trained if case.trained is not None and case.trained <= case.loops else case.loops
    assert result.trained_loop == trained and result.horizon == 4 * trained
    x, delta = states[trained].reshape(-1), (states[trained] - states[trained - 1]).reshape(-1)
    jacobian, v, total, expected = jacobians[trained], delta, torch.zeros_like(delta), []
    for _ in result.displacement_loops[: result.products]:
        v = jacobian @ v
        total = total + v
        expected.append(float(total.norm() / x.norm()))
    assert result.displacement[: result.products] == pytest.approx(expected, rel=1e-6, abs=1e-14)
    if case.readout is not None:  # the output forecast: the readout at x_T + sum_k J^k delta (dense J)
        assert result.judged_on == "output"
        with torch.no_grad():
            logits = case.readout(states[trained]).to(F64)
            base = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), -1)
            v, total, divergence = delta, torch.zeros_like(delta), []
            for _ in result.output_divergence:
                v = jacobian @ v
                total = total + v
                moved = case.readout((x + total).reshape(states[trained].shape)).to(F64).reshape(base.shape)
                divergence.append(float((base.exp() * (base - torch.log_softmax(moved, -1))).sum(-1).mean()))
        assert result.output_divergence == pytest.approx(divergence, rel=1e-6, abs=1e-14)
    else:
        assert result.judged_on == "state" and result.output_divergence == []
    measured_ = [float((states[t] - states[trained]).norm() / states[trained].norm())
                 for t in range(trained + 1, case.loops + 1)]
    assert result.measured_displacement == pytest.approx(measured_, rel=1e-9, abs=1e-14)
    if case.toy:  # rates 0.6 and below: the steps shrink geometrically, the state stays within its threshold
        assert result.word == "settling" and result.collapse_loop is None and result.rate < 0.61


CHECKS = {"spectral_norm": check_spectral_norm, "eigenvalues": check_eigenvalues, "lyapunov": check_lyapunov,
          "clusters": check_clusters, "energy": check_energy, "fixed_points": check_fixed_points, "attractors": check_attractors,
          "halting": check_halting, "loop_depth": check_loop_depth, "loop_lens": check_loop_lens,
          "depth_safety": check_depth_safety, "regime": check_regime}

#: cells that fail for a bug in a module this test's owner does not edit: (diagnostic, kind) -> the bug
KNOWN_BUGS: dict = {}


def _cells():
    for name in list_diagnostics():
        for kind, (_, marks) in KINDS.items():
            bug = KNOWN_BUGS.get((name, kind))
            yield pytest.param(name, kind, id=f"{name}-{kind}", marks=[*marks, *(
                [pytest.mark.xfail(strict=True, reason=bug)] if bug else [])])


@pytest.mark.parametrize("name, kind", list(_cells()))
def test_cell(name, kind):
    """One diagnostic on one kind of map, against its independent reference (and the row's state norms: RMS per
    token, the tokens read the same way on every layout)."""
    if name not in CHECKS:
        pytest.fail(f"diagnostic {name!r} is registered but has no case in the matrix — add check_{name} to CHECKS "
                    "in tests/test_diagnostics_matrix.py, comparing its result with an independent computation")
    for index, case in enumerate(cases(kind)):
        states, jacobians = reference(kind, index)
        norms = [float(state.norm() / math.sqrt(case.tokens)) for state in states]
        assert case.row.state_norm == pytest.approx(norms, rel=1e-9)
        CHECKS[name](case, case.row.diagnostic(name), states, jacobians)


# ---------------------------------------------------------------- the matrix covers every diagnostic
def test_a_newly_registered_diagnostic_joins_the_matrix_and_fails_without_a_case():
    from jacobiscope.diagnostics import Diagnostic, register_diagnostic, unregister_diagnostic

    class FinalNorm(Diagnostic):
        name = "final_norm_matrix"

        def compute(self, context):
            return float(context.states[-1].norm())

    register_diagnostic(FinalNorm())
    try:
        ids_ = [param.id for param in _cells()]
        assert {f"final_norm_matrix-{kind}" for kind in KINDS} <= set(ids_)
        assert len(ids_) == len(list_diagnostics()) * len(KINDS)
        with pytest.raises(pytest.fail.Exception, match="'final_norm_matrix' is registered but has no case"):
            test_cell("final_norm_matrix", "tokens")
    finally:
        unregister_diagnostic("final_norm_matrix")
    assert set(list_diagnostics()) <= set(CHECKS)


# ---------------------------------------------------------------- invariance: one map, several presentations
def plain(result):
    return result.to_dict() if hasattr(result, "to_dict") else result


def assert_same_rows(first, second, names):
    assert first.state_norm == pytest.approx(second.state_norm, rel=1e-12)
    assert first.step_size == pytest.approx(second.step_size, rel=1e-12)
    for name in names:
        one, two = plain(first.diagnostic(name)), plain(second.diagnostic(name))
        assert (one is None) == (two is None), name
        if one is not None:
            assert _numbers(one) == pytest.approx(_numbers(two), rel=1e-9, abs=1e-12, nan_ok=True), name
            assert _words(one) == _words(two), name


def _numbers(value):
    if isinstance(value, dict):
        return [number for key in sorted(value) for number in _numbers(value[key])]
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in _numbers(item)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _words(value):
    if isinstance(value, dict):
        return {key: _words(item) for key, item in value.items() if key != "reason"}
    if isinstance(value, (list, tuple)):
        return [_words(item) for item in value]
    return value if isinstance(value, (str, bool)) or value is None else "number"


def test_the_same_map_as_T_H_1_T_H_batch_dims_and_protocol_gives_the_same_numbers():
    """[T, H], [1, T, H] (batch_dims=0), batch_dims=1 and the protocol's [1, T, H]: one map, one row of numbers."""
    # the protocol says a trained depth: the diagnostics that read it differ there
    names = [name for name in list_diagnostics() if name not in ("loop_depth", "depth_safety")]
    reference_row = cases("tokens")[0].row
    for kind in ("batch_of_one", "batch_dims", "protocol"):
        assert_same_rows(reference_row, cases(kind)[0].row, names)
    for kind in ("batch_of_one", "batch_dims"):
        assert_same_rows(reference_row, cases(kind)[0].row, ["loop_depth", "depth_safety"])
    bare = cases("callable")[0].row  # no readout and no drive: the rest is the same, exits included
    assert_same_rows(reference_row, bare, [name for name in names
                                           if name not in ("energy", "halting", "loop_lens")])
    assert [rule["exits"] for rule in bare.diagnostic("halting").rules] == [
        rule["exits"] for rule in reference_row.diagnostic("halting").rules]


def test_a_native_loop_gives_the_numbers_of_its_step_on_T_H_states():
    """ALBERT's own loop keeps the batch axis of one in its state, [1, T, H]; the same step on [T, H] states (the
    axis dropped) must give the same row: tokens, halting, clusters, state norms, spectra, verdict."""
    case = cases("native")[0]
    step = case.step
    twin = measured(lambda x: step(x.unsqueeze(0))[0], case.x0[0], MODEL_LOOPS,
                    [name for name in list_diagnostics() if name not in ("loop_depth", "loop_lens", "depth_safety")])
    # the native loop says its trained depth (depth_safety forecasts from it); the bare step does not
    names = [name for name in list_diagnostics() if name not in ("loop_depth", "halting", "loop_lens",
                                                                  "depth_safety")]
    assert_same_rows(case.row, twin, names)
    native, bare = case.row.diagnostic("halting"), twin.diagnostic("halting")
    assert native.tokens == bare.tokens == 4 and native.max_change == pytest.approx(bare.max_change, rel=1e-9)


# ---------------------------------------------------------------- the bug this matrix was written for
def test_albert_halting_reads_12_tokens_and_agrees_100_percent_when_none_exits_early():
    """Issue 30: on a tiny ALBERT's own loop (state [1, 12, H]) where no token exits early, halting reported 8%
    agreement (1 of 12: the batch axis read as the token axis, one exit compared with 12 predictions)."""
    config = transformers.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=6,
                                       num_attention_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    model = transformers.AlbertForMaskedLM(config).eval()
    inputs = torch.randint(2, 60, (1, 12), generator=torch.Generator().manual_seed(5))
    report = jacobiscope.analyze(model, inputs, loops=6, diagnostics=["halting"], progress=False,
                                 options={"halting_thresholds": [1e-3, 1e-4]})
    (row,) = report.rows
    halting = row.diagnostic("halting")
    assert row.state_shape == [1, 12, 16] and halting.tokens == 12 and halting.agreement_by == "readout"
    for rule in halting.rules:
        assert rule["exits"] == [6] * 12 and rule["loops_saved"] == 0.0  # no token exits early ...
        assert rule["agreement"] == 1.0  # ... so every token's output is the full run's (it was 1/12 = 8%)
    assert "agrees" in report.summary() and "100%" in report.summary()
    predictions = model(input_ids=inputs).logits.argmax(-1)
    assert len(set(predictions[0].tolist())) > 1  # distinct outputs per token: a one-token reading cannot pass


@pytest.mark.slow
def test_a_batch_of_inputs_gives_each_input_its_own_numbers():
    """Three inputs through one map source: each row equals that input measured alone (cells check each against
    the model's own forward)."""
    model, inputs = gpt2(), ids(batch=3, length=4, seed=5)
    with jacobiscope.adapters.map_source(model, inputs, mode="block", layers=[0]) as source:
        rows = [measured(item.maps[0], item.maps[0].x0, MODEL_LOOPS, ["lyapunov", "halting", "clusters"])
                for item in source]
    for index in range(3):
        with jacobiscope.adapters.map_source(model, inputs[index : index + 1], mode="block", layers=[0]) as alone:
            row = measured(alone[0].maps[0], alone[0].maps[0].x0, MODEL_LOOPS, ["lyapunov", "halting", "clusters"])
        assert_same_rows(rows[index], row, ["lyapunov", "halting", "clusters", "regime"])
    assert rows[0].lyapunov["exponents"] != pytest.approx(rows[1].lyapunov["exponents"])


def test_halting_groups_a_state_s_axes_by_the_readout_s_predictions():
    """A state [1, T, blocks, H] (Inkling-2's pass: every token carries several block states) with a readout of one
    prediction per token: halting reads T tokens of blocks * H features; without the readout, T * blocks rows."""
    def step(x):  # the toy contraction on each block's [T, H]
        return TOY.step(x.transpose(-3, -2)).transpose(-3, -2)

    x0 = torch.stack([TOY.x0, TOY.x0.flip(0)], dim=1)[None]  # [1, T, 2, H]
    looped = jacobiscope.LoopedMap(step, x0=x0)
    looped.info.readout = lambda x: x.mean(-2) @ TOY.head  # [1, T, classes]
    row = measured(looped, x0, LOOPS, ["halting"])
    halting = row.diagnostic("halting")
    states = looped.trajectory(x0, LOOPS)
    change = (states[1:] - states[:-1]).reshape(LOOPS, T, -1).norm(dim=-1) / states[:-1].reshape(
        LOOPS, T, -1).norm(dim=-1)
    assert halting.tokens == T and halting.max_change == pytest.approx(change.max(1).values.tolist(), rel=1e-9)
    looped.info.readout = None
    assert measured(looped, x0, LOOPS, ["halting"]).diagnostic("halting").tokens == 2 * T
    assert row.state_norm[0] == pytest.approx(float(x0.norm() / math.sqrt(2 * T)))  # RMS per (token, block)


def test_measure_in_float64_casts_a_float32_models_own_loop():
    """``measure(dtype=float64)`` on a float32 model's own loop (state [1, T, H], batch_dims=0) computes in a float64
    copy: the same numbers as measuring ``looped.to(float64)`` (it failed: the cast reached only measure's batch
    wrapper, and the float32 module met float64 states)."""
    config = transformers.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                                       num_attention_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    model = transformers.AlbertForMaskedLM(config).eval()
    looped = jacobiscope.native_loop(model, {"input_ids": ids()})
    names = ["lyapunov", "halting", "clusters", "regime"]
    row = measure(looped, loops=4, diagnostics=names, dtype=F64)
    assert row.dtype == "float64" and not row.flags
    assert_same_rows(row, measure(looped.to(F64), loops=4, diagnostics=names), names)
    assert next(model.parameters()).dtype == torch.float32  # the model itself is not cast
