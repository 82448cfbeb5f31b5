"""describe's prices: jvps priced as analyze runs them (on the recorded split graph, or eagerly where none can be
recorded), each estimate the diagnostic's declared counts times the block's own timed operations."""
import pytest
import torch

import jacobiscope
from jacobiscope._analyze_describe import _recorded_prices, _seconds
from jacobiscope.adapters import map_source
from jacobiscope.diagnostics._base import resolve
from jacobiscope.diagnostics._measure import _one_trajectory
from jacobiscope.linalg._linearized import graph_leaves, split_graph
from jacobiscope.linalg.operators import jvp
from jacobiscope.maps import as_looped_map

from hf_models import tiny_inputs, tiny_model

OPTIONS = {"k": 4, "eigen_k": 4, "spectral_samples": 3}


def test_jvps_are_priced_on_the_graph_analyze_will_reuse():
    # a width no other test builds: recorded graphs are shared by structure for the whole process, and this test
    # must see the first recording of its structure
    model = tiny_model("gpt2", n_embd=40, n_head=4)
    plans = jacobiscope.describe(model, tiny_inputs("gpt2"), loops=6)
    assert [p.product_path for p in plans] == ["linearized"] * len(plans)
    for plan in plans:
        prices = plan.operation_seconds
        assert set(prices) == {"forward", "jvp", "vjp", "jvp_block", "state_part"}
        per = {d.name: _seconds(d.cost(plan.state_size, 6, OPTIONS), prices) for d in resolve(None)}
        assert plan.per_diagnostic_seconds == pytest.approx(per)
        assert plan.estimated_seconds == pytest.approx(6 * prices["forward"] + sum(per.values()))
        # a Krylov diagnostic: its declared jvps on the linear part, plus the forward's part once at its state
        eigen = next(d for d in resolve(None) if d.name == "eigenvalues").cost(plan.state_size, 6, OPTIONS)
        assert per["eigenvalues"] == pytest.approx(eigen["jvp"] * prices["jvp"] + prices["state_part"])
        # the Lyapunov loop's block: the faster of the eager vmapped jvp and the recorded parts
        assert prices["jvp_block"] <= prices["state_part"] + 4 * prices["jvp"] * (1 + 1e-9)
    # layers of one structure share one recording: the first layer paid for it, the others found it
    assert plans[0].recording_seconds > 0 and all(p.recording_seconds == 0.0 for p in plans[1:])
    assert all(p.recording_seconds == 0.0 for p in jacobiscope.describe(model, tiny_inputs("gpt2"), loops=6))
    # the maps analyze measures (one trajectory, a batch axis of one) find it too: their first product starts on
    # the graph, not eagerly
    with map_source(model, tiny_inputs("gpt2")) as source:
        for item in source:
            for looped in item.maps:
                measured, x0 = _one_trajectory(looped, looped.x0)
                assert split_graph(measured, x0, measured.module, record=False) is not None


def test_a_block_whose_jvp_cannot_be_recorded_is_priced_eagerly():
    weight = torch.randn(6, 6, dtype=torch.float64) / 3

    def branching(x):  # Python control flow on the state's values: no graph can be recorded
        return torch.tanh(x @ weight) if float(x.sum()) > -1e9 else x

    eager = {"forward": 1.0, "jvp": 2.0, "vjp": 3.0, "jvp_block": 4.0}
    assert _recorded_prices(as_looped_map(branching), torch.randn(1, 6, dtype=torch.float64), 4, eager)[0] == {}


def test_a_recorded_graph_prices_the_product_analyze_would_compute():
    weight = torch.randn(6, 6, dtype=torch.float64) / 3
    looped = as_looped_map(lambda x: torch.tanh(x @ weight))
    x0 = torch.randn(1, 6, dtype=torch.float64)
    eager = {"forward": 1.0, "jvp": 2.0, "vjp": 3.0, "jvp_block": 1e-12}  # an eager block "faster": it is kept
    recorded, seconds = _recorded_prices(looped, x0, 4, eager)
    assert set(recorded) == {"jvp", "state_part", "jvp_block"} and seconds > 0 and recorded["jvp_block"] == 1e-12
    # what was priced is the graph analyze reuses, and it computes the map's jvp
    constant, linear = split_graph(looped, x0, looped._function, record=False)
    v = torch.randn_like(x0)
    output, product = linear(*constant(*graph_leaves(looped, x0)), v)
    torch.testing.assert_close(product, jvp(looped, x0, v), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(output, torch.tanh(x0 @ weight), rtol=1e-12, atol=1e-12)
    assert _recorded_prices(looped, x0, 4, eager)[1] == 0.0  # recorded once: the next call finds it


def test_describe_takes_a_model_by_name_as_analyze_does():
    """describe('itrsa-sudoku', ...) plans what describe(<the loaded checkpoint>, ...) plans: the same maps and
    sizes (the timings are measured, so not compared)."""
    import torch

    import jacobiscope

    puzzles = torch.zeros(1, 81, dtype=torch.long)
    by_name = jacobiscope.describe("itrsa-sudoku", puzzles, loops=8)
    loaded = jacobiscope.describe(jacobiscope.hub.load_pretrained("itrsa-sudoku"), puzzles, loops=8)
    assert [(p.layer, p.state_shape, p.product_path) for p in by_name] == [
        (p.layer, p.state_shape, p.product_path) for p in loaded]
    assert by_name[0].state_size == 81 * jacobiscope.hub.load_pretrained("itrsa-sudoku").config.hidden_size
