"""Bad inputs to native recurrences and the public recurrence protocol (``jacobiscope_recurrences`` /
``jacobiscope_recurrence``): a protocol model that returns junk for any key is refused naming the key and what came,
before a diagnostic meets it; a recurrence name with a typo gets its closest name. Real tiny models, no mocks."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import jacobiscope
from jacobiscope.adapters import AdapterError
from jacobiscope.errors import ArgumentError, BudgetError, StepError, StepOutputError

IDS = torch.tensor([[1, 2, 3]])
MISSING = object()


class Looped(nn.Module):
    """The smallest protocol model: an embedding injected into a shared linear core at every iteration, a coda.
    ``changes`` replaces (or, with MISSING, removes) keys of the dict its ``jacobiscope_recurrence`` returns."""

    jacobiscope_recurrences = ("core", "alt")

    def __init__(self, **changes):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 4)
        self.core = nn.Linear(4, 4)
        self.coda = nn.Linear(4, 10)
        self.changes = changes

    def forward(self, input_ids):
        e = self.embed(input_ids)
        state = torch.zeros_like(e)
        for _ in range(3):
            state = torch.tanh(self.core(state) + e)
        return self.coda(state)

    def jacobiscope_recurrence(self, name, input_ids):
        e = self.embed(input_ids).detach()
        given = {"step": lambda s: torch.tanh(self.core(s) + e), "x0": torch.zeros_like(e), "loops": 3,
                 "readout": self.coda, "quality": lambda s: float(s.mean())}
        for key, value in self.changes.items():
            if value is MISSING:
                given.pop(key, None)
            else:
                given[key] = value
        return given


class Returns(Looped):
    """A protocol model whose method returns ``self.returned`` itself (None, a list, ...)."""

    def __init__(self, returned):
        super().__init__()
        self.returned = returned

    def jacobiscope_recurrence(self, name, input_ids):
        return self.returned


@pytest.mark.guards("internal")
def test_a_well_formed_protocol_model_is_measured():
    looped = jacobiscope.native_loop(Looped(), IDS)
    assert looped.meta["loops"] == 3 and callable(looped.meta["readout"])
    assert looped.trajectory(looped.x0, 3).shape == (4, 1, 3, 4)


BAD_KEYS = {
    # key: (value, error, fragment naming the problem, fragment naming the fix)
    "loops-zero": ("loops", 0, AdapterError, "'loops' must be the configured iteration count, an int >= 1, got int 0",
                   "return e.g. 'loops'"),
    "loops-negative": ("loops", -4, AdapterError, "got int -4", "return e.g. 'loops'"),
    "loops-float": ("loops", 2.5, AdapterError, "got float 2.5", "return e.g. 'loops'"),
    "loops-bool": ("loops", True, AdapterError, "got bool True", "return e.g. 'loops'"),
    "loops-str": ("loops", "6", AdapterError, "got str '6'", "return e.g. 'loops'"),
    "loops-nan": ("loops", math.nan, AdapterError, "got float nan", "return e.g. 'loops'"),
    "loops-none": ("loops", None, AdapterError, "got NoneType None", "return e.g. 'loops'"),
    "loops-huge": ("loops", 10**12, AdapterError, "'loops'=1000000000000 is over the budget of 100000 loops",
                   "JACOBISCOPE_MAX_LOOPS"),
    "loops-tensor-float": ("loops", torch.tensor(3.0), AdapterError, "'loops' must be", "return e.g. 'loops'"),
    "step-int": ("step", 3, AdapterError, "'step' must be a callable state -> state, got int 3", "return e.g. 'step'"),
    "step-none": ("step", None, AdapterError, "'step' must be a callable", "return e.g. 'step'"),
    "x0-list": ("x0", [0.0, 0.0], AdapterError, "'x0' must be a torch.Tensor", "return a tensor"),
    "x0-none": ("x0", None, AdapterError, "'x0' must be a torch.Tensor", "return a tensor"),
    "x0-integer": ("x0", torch.zeros(1, 3, 4, dtype=torch.long), AdapterError, "'x0' must be a floating tensor",
                   "x0.float()"),
    "x0-nan": ("x0", torch.full((1, 3, 4), math.nan), AdapterError, "'x0' holds 12 NaN/Inf entries",
               "check the layers"),
    "x0-empty": ("x0", torch.zeros(1, 0, 4), AdapterError, "'x0' is empty (shape (1, 0, 4))", "at least one entry"),
    "readout-int": ("readout", 3, AdapterError, "'readout' must be a callable state -> logits", "leave 'readout' out"),
    "quality-str": ("quality", "high", AdapterError, "'quality' must be a callable", "leave 'quality' out"),
    "description-int": ("description", 7, AdapterError, "'description' must be a str, got int 7", "one-line str"),
}


@pytest.mark.parametrize("key, value, error, problem, fix", [
    pytest.param(*case, id=name, marks=pytest.mark.guards("silent" if name in (
        "loops-float", "loops-bool", "loops-str", "readout-int", "quality-str") else
        "hang" if name == "loops-huge" else "internal")) for name, case in BAD_KEYS.items()])
def test_a_bad_protocol_value_is_refused_naming_its_key(key, value, error, problem, fix):
    with pytest.raises(error) as info:
        jacobiscope.native_loop(Looped(**{key: value}), IDS)
    assert "Looped.jacobiscope_recurrence('core')" in str(info.value)
    assert problem in str(info.value) and fix in str(info.value)


STEP_JUNK = {
    "returns-none": (lambda s: None, StepOutputError, "returned NoneType"),
    "wrong-shape": (lambda s: s[..., :2], StepOutputError, "changed the state's shape: expected (1, 3, 4), got (1, 3, 2)"),
    "returns-tuple": (lambda s: (s, s), StepOutputError, "returned a tuple of 2 items"),
    "returns-numpy": (lambda s: s.numpy(), StepOutputError, "returned ndarray"),
    "raises": (lambda s: s @ torch.ones(5, 5), StepError, "raised RuntimeError"),
    "other-dtype": (lambda s: s.double(), StepOutputError, "returned torch.float64 for a torch.float32 state"),
}


@pytest.mark.parametrize("step, error, problem", [
    pytest.param(*case, id=name, marks=pytest.mark.guards("internal")) for name, case in STEP_JUNK.items()])
def test_a_step_that_returns_junk_is_named_as_the_protocol_step_when_the_map_is_built(step, error, problem):
    with pytest.raises(error) as info:
        jacobiscope.native_loop(Looped(step=step), IDS)
    message = str(info.value)
    assert "Looped.jacobiscope_recurrence('core'): 'step' failed its first iteration from 'x0'" in message
    assert problem in message


@pytest.mark.parametrize("key, function, error, problem, fix", [
    pytest.param("readout", lambda s: "logits", AdapterError, "'readout' returned str 'logits', expected a float "
                 "tensor of logits", "return the logits tensor", id="readout-returns-str",
                 marks=pytest.mark.guards("internal")),
    pytest.param("readout", lambda s: (s,), AdapterError, "'readout' returned tuple", "not the model output object",
                 id="readout-returns-tuple", marks=pytest.mark.guards("internal")),
    pytest.param("readout", lambda s: s.argmax(-1), AdapterError, "expected a float tensor of logits",
                 "return the logits tensor", id="readout-returns-integer-classes", marks=pytest.mark.guards("silent")),
    pytest.param("readout", lambda s: 1 / 0, StepError, "'readout' raised ZeroDivisionError", "fix 'readout'",
                 id="readout-raises", marks=pytest.mark.guards("internal")),
    pytest.param("quality", lambda s: "solved", AdapterError, "'quality' returned str 'solved', expected one real "
                 "number", "return e.g. float(accuracy)", id="quality-returns-str", marks=pytest.mark.guards("silent")),
    pytest.param("quality", lambda s: None, AdapterError, "'quality' returned NoneType None", "float(accuracy)",
                 id="quality-returns-none", marks=pytest.mark.guards("silent")),
    pytest.param("quality", lambda s: torch.ones(3), AdapterError, "'quality' returned Tensor", "float(accuracy)",
                 id="quality-returns-vector", marks=pytest.mark.guards("silent")),
    pytest.param("quality", lambda s: complex(1, 1), AdapterError, "'quality' returned complex", "float(accuracy)",
                 id="quality-returns-complex", marks=pytest.mark.guards("silent")),
])
def test_a_readout_or_quality_returning_junk_is_refused_naming_the_key(key, function, error, problem, fix):
    with pytest.raises(error) as info:
        jacobiscope.native_loop(Looped(**{key: function}), IDS)
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.parametrize("quality", [lambda s: True, lambda s: np.float32(0.5), lambda s: torch.tensor(0.25)],
                         ids=["bool", "numpy-scalar", "0-d-tensor"])
@pytest.mark.guards("internal")
def test_a_quality_score_of_any_real_scalar_type_is_accepted(quality):
    looped = jacobiscope.native_loop(Looped(quality=quality), IDS)
    assert callable(looped.meta["quality"])


@pytest.mark.parametrize("returned, problem", [
    pytest.param(None, "returned NoneType None; it must return a dict", id="returns-none",
                 marks=pytest.mark.guards("internal")),
    pytest.param([1, 2], "returned list [1, 2]; it must return a dict", id="returns-list",
                 marks=pytest.mark.guards("internal")),
    pytest.param("core", "returned str 'core'; it must return a dict", id="returns-str",
                 marks=pytest.mark.guards("internal")),
    pytest.param(torch.zeros(3), "returned Tensor", id="returns-tensor", marks=pytest.mark.guards("internal")),
])
def test_a_protocol_method_that_returns_no_dict_is_refused(returned, problem):
    with pytest.raises(AdapterError) as info:
        jacobiscope.native_loop(Returns(returned), IDS)
    assert problem in str(info.value) and "return {'step': ..., 'x0': ..., 'loops': ...}" in str(info.value)


@pytest.mark.guards("silent")
def test_a_misspelled_protocol_key_is_refused_with_did_you_mean():
    with pytest.raises(AdapterError, match=r"unknown key 'readuot' \(did you mean 'readout'\?\) — the keys are step"):
        jacobiscope.native_loop(Looped(readuot=lambda s: s), IDS)


@pytest.mark.guards("internal")
def test_a_missing_required_key_is_named():
    with pytest.raises(AdapterError, match=r"returned no 'x0', 'loops' — it must return a dict with step, x0 and loops"):
        jacobiscope.native_loop(Looped(loops=MISSING, x0=MISSING), IDS)


@pytest.mark.guards("internal")
def test_a_protocol_method_that_raises_is_named_with_its_error_chained():
    class Raises(Looped):
        def jacobiscope_recurrence(self, name, input_ids):
            raise KeyError("hidden_states")

    with pytest.raises(AdapterError, match=r"Raises.jacobiscope_recurrence\('core'\) raised KeyError: 'hidden_states' "
                                           r"— fix the method; it is called with .*input_ids") as info:
        jacobiscope.native_loop(Raises(), IDS)
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("declared, problem, fix", [
    pytest.param("core", "must be a tuple of recurrence names, got the str 'core'", "jacobiscope_recurrences = ('core',)",
                 id="a-bare-string", marks=pytest.mark.guards("silent")),
    pytest.param(("core", 3), "must hold non-empty names (str), got 3", "jacobiscope_recurrences = ('core',)",
                 id="a-non-str-name", marks=pytest.mark.guards("silent")),
    pytest.param(("core", ""), "must hold non-empty names (str), got ''", "jacobiscope_recurrences = ('core',)",
                 id="an-empty-name", marks=pytest.mark.guards("silent")),
    pytest.param(("core", "core"), "names 'core' more than once", "name each recurrence once",
                 id="a-repeated-name", marks=pytest.mark.guards("silent")),
    pytest.param({"core": 1}, "must be a tuple of recurrence names, got the dict", "jacobiscope_recurrences = (",
                 id="a-dict", marks=pytest.mark.guards("silent")),
])
def test_a_malformed_recurrence_declaration_is_refused(declared, problem, fix):
    model = Looped()
    model.jacobiscope_recurrences = declared
    with pytest.raises(AdapterError) as info:
        jacobiscope.list_recurrences(model)
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.guards("internal")
def test_a_declaration_without_the_method_is_refused_with_the_method_to_add():
    class Declares(nn.Module):
        jacobiscope_recurrences = ("core",)

    with pytest.raises(AdapterError, match=r"has no method jacobiscope_recurrence\(name, \*\*inputs\) — add it"):
        jacobiscope.native_loop(Declares(), IDS)


@pytest.mark.parametrize("call", [
    pytest.param(lambda: jacobiscope.native_loop(Looped(), IDS, recurrence="cor"), id="native_loop",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda: jacobiscope.analyze(Looped(), IDS, recurrence="cor", loops=2, progress=False), id="analyze",
                 marks=pytest.mark.guards("internal")),
])
def test_a_recurrence_name_with_a_typo_gets_the_closest_name(call):
    with pytest.raises(AdapterError, match=r"has no recurrence 'cor' \(did you mean 'core'\?\) — it offers core, alt"):
        call()


@pytest.mark.guards("internal")
def test_a_recurrence_given_as_a_non_string_is_refused():
    with pytest.raises(AdapterError, match=r"recurrence must be a name \(str\), got int 0 — pass one of core, alt"):
        jacobiscope.native_loop(Looped(), IDS, recurrence=0)


@pytest.mark.guards("hang")
def test_analyze_refuses_absurd_loops_for_a_protocol_model_before_it_runs():
    with pytest.raises(BudgetError, match=r"loops=1000000000 keeps 1000000001 states.*budget of 100000 loops.*"
                                          r"pass loops <= 100000"):
        jacobiscope.analyze(Looped(), IDS, loops=10**9, progress=False)
    assert issubclass(BudgetError, ArgumentError) and issubclass(BudgetError, MemoryError)


@pytest.mark.guards("internal")
def test_numpy_integer_loops_from_a_protocol_model_are_plain_ints():
    looped = jacobiscope.native_loop(Looped(loops=np.int64(3)), IDS)
    assert looped.meta["loops"] == 3 and type(looped.meta["loops"]) is int


# ------------------------------------------------------------- the optional keys a batched loop gives (batch_dims, ...)
OPTIONAL_KEYS = [
    pytest.param("batch_dims", 3, "'batch_dims' must be an int in 0..2", "return e.g. 'batch_dims': 1",
                 id="batch-dims-beyond-the-state"),
    pytest.param("batch_dims", 1.0, "'batch_dims' must be an int in 0..2", "or leave it out", id="batch-dims-float"),
    pytest.param("drive", "attention", "'drive' must be a callable state -> Y_t", "return a function",
                 id="drive-not-callable"),
    pytest.param("eta", "half", "'eta' must be a number (the loop's step size), got str 'half'",
                 "'eta': self.config.eta", id="eta-str"),
]


@pytest.mark.parametrize("key, value, problem, fix", OPTIONAL_KEYS)
@pytest.mark.guards("internal")
def test_an_optional_key_with_junk_is_refused_naming_the_key(key, value, problem, fix):
    with pytest.raises(AdapterError) as info:
        jacobiscope.native_loop(Looped(**{key: value}), IDS)
    assert problem in str(info.value) and fix in str(info.value)


@pytest.mark.guards("internal")
def test_a_batched_loop_with_a_drive_and_eta_keeps_them():
    model = Looped(batch_dims=1, eta=0.5, drive=lambda s: 2 * s)
    looped = jacobiscope.native_loop(model, torch.tensor([[1, 2, 3], [4, 5, 6]]))
    assert looped.batch_dims == 1 and looped.info.eta == 0.5 and looped.meta["eta"] == 0.5
    assert torch.equal(looped.drive(looped.x0 + 1), 2 * (looped.x0 + 1))
    report = jacobiscope.analyze(model, torch.tensor([[1, 2, 3], [4, 5, 6]]), loops=3, k=1,
                                 diagnostics=["lyapunov"], progress=False)
    assert [row.state_shape for row in report.rows] == [[3, 4], [3, 4]]  # each input its own trajectory


@pytest.mark.parametrize("call", [
    pytest.param(lambda model, ids: jacobiscope.native_loop(model, ids), id="native-loop"),
    pytest.param(lambda model, ids: jacobiscope.loop_lens(model, ids, loops=2), id="loop-lens"),
    pytest.param(lambda model, ids: jacobiscope.native_loop(model, {"input_ids": ids}), id="native-loop-dict"),
])
@pytest.mark.guards("internal")
def test_empty_inputs_to_a_models_own_loop_name_the_inputs_not_the_recurrence(call):
    # an empty batch surfaced as "recurrence 'core': 'x0' is empty — return the state entering the first
    # iteration": advice for a protocol author, not for a caller who passed no tokens
    with pytest.raises(jacobiscope.errors.InputError,
                       match=r"The input 'input_ids' is empty \(shape \(1, 0\)\) — pass at least one example"):
        call(Looped(), torch.zeros(1, 0, dtype=torch.long))


@pytest.mark.parametrize("options, problem", [
    pytest.param({"noise": math.nan}, "noise must be a finite number >= 0", id="noise-nan"),
    pytest.param({"noise": True}, "noise must be a finite number >= 0", id="noise-bool"),
    pytest.param({"noise": -0.5}, "noise must be a finite number >= 0", id="noise-negative"),
    pytest.param({"interpolate": (torch.zeros(1, 3, 4), math.inf)}, "interpolate's alpha must be a finite number",
                 id="alpha-inf"),
    pytest.param({"replace": torch.full((1, 3, 4), math.nan)}, "replace contains NaN/Inf", id="replace-nan"),
])
@pytest.mark.guards("silent")
def test_an_intervention_with_a_non_finite_argument_is_refused_before_it_runs(options, problem):
    # a NaN scale or state used to run and end as "the state turned NaN/Inf at loop 2", as if the model had
    with pytest.raises(ArgumentError, match=problem):
        jacobiscope.intervene(Looped(), IDS, at_loop=1, loops=3, **options)
