"""The registered `depth_safety` diagnostic through `measure` / `analyze`: the forecast reads only the loops up to
the trained depth (checked by changing the later ones), its measured twin reads the rest, the report states the
word and the forecast loop in its verdict line, and odd trained depths are flagged, not guessed."""
import pytest
import torch

import jacobiscope

F64 = torch.float64


def two_mode_map(trained=8):
    matrix = torch.diag(torch.tensor([0.5, 1.05], dtype=F64))
    looped = jacobiscope.LoopedMap(lambda x: x @ matrix)
    looped.info.loops = trained
    return looped


def run(looped, x0, loops, **options):
    return jacobiscope.measure(looped, x0, loops=loops, diagnostics=["depth_safety"], options=options)


def test_forecast_and_measured_departure_agree_on_a_linear_map_and_the_verdict_line_says_so():
    row = run(two_mode_map(), torch.tensor([1.0, 1e-3], dtype=F64), 40, depth_safety_threshold=1.0)
    result = row.results["depth_safety"]
    assert (result.word, result.trained_loop, result.trained_from, result.horizon) == (
        "drifting", 8, "info.loops", 32)
    assert result.collapse_loop == result.measured_collapse_loop == 23
    assert result.displacement[:32 - 8] == pytest.approx(result.measured_displacement[:24], rel=1e-9)
    report = jacobiscope.Report([row])
    assert "past its trained depth (8) the loop is drifting: forecast to leave the trained-depth state at loop 23" \
        in report.summary()
    pytest.importorskip("pandas")
    frame = report.to_dataframe()
    assert frame["depth_safety.collapse_loop"][0] == 23 and frame["depth_safety.word"][0] == "drifting"


def test_the_forecast_reads_nothing_past_the_trained_depth():
    """Two maps equal up to loop 8 and different after it: the same forecast, different measured departures."""
    matrix = torch.diag(torch.tensor([0.5, 1.05], dtype=F64))
    x0 = torch.tensor([1.0, 1e-3], dtype=F64)
    states = [x0]
    for _ in range(8):
        states.append(states[-1] @ matrix)
    eighth = states[-1]

    def kicked(x):  # the same map, except that the state after loop 8 is pushed far away once
        out = x @ matrix
        return out + 10.0 if torch.equal(x, eighth) else out

    plain, other = jacobiscope.LoopedMap(lambda x: x @ matrix), jacobiscope.LoopedMap(kicked)
    plain.info.loops = other.info.loops = 8
    first, second = (run(m, x0, 30, depth_safety_threshold=1.0).results["depth_safety"] for m in (plain, other))
    assert first.displacement == second.displacement and first.word == second.word
    assert first.measured_collapse_loop == 23 and second.measured_collapse_loop == 9


def test_a_settling_map_forecasts_no_departure_within_the_horizon_option():
    looped = jacobiscope.LoopedMap(lambda x: 1.0 + 0.5 * (x - 1.0))
    looped.info.loops = 5
    row = run(looped, torch.tensor([4.0, -2.0], dtype=F64), 5, depth_safety_horizon=50)
    result = row.results["depth_safety"]
    assert (result.word, result.collapse_loop, result.horizon) == ("settling", None, 50)
    assert result.measured_displacement == [] and result.measured_collapse_loop is None
    assert "settling: its state is not forecast to leave the trained-depth state within 50 loops" in jacobiscope.Report([row]).summary()


def test_without_a_trained_depth_the_last_loop_is_used_and_said():
    row = run(lambda x: 0.5 * x, torch.ones(3, dtype=F64), 6)
    result = row.results["depth_safety"]
    assert (result.trained_loop, result.trained_from, result.horizon) == (6, "last loop", 24)
    # the words do not invent a trained depth the map never named
    sentence = result.sentence()
    assert sentence.startswith("past loop 6 (the last measured; the map names no trained depth) the loop is ")
    assert "trained depth (" not in sentence and "trained-depth" not in sentence
    assert sentence in jacobiscope.Report([row]).summary()


def test_a_trained_depth_beyond_the_run_is_flagged_and_the_last_finite_loop_used():
    row = run(two_mode_map(trained=20), torch.tensor([1.0, 1e-3], dtype=F64), 10)
    assert row.results["depth_safety"].trained_loop == 10
    assert any("info.loops=20 is beyond the last finite loop 10" in flag for flag in row.flags)


def test_a_horizon_not_past_the_trained_depth_is_flagged():
    row = run(two_mode_map(), torch.tensor([1.0, 1e-3], dtype=F64), 8, depth_safety_horizon=4)
    assert row.results["depth_safety"].horizon == 32
    assert any("depth_safety_horizon=4 is not past the trained depth 8" in flag for flag in row.flags)


@pytest.mark.parametrize("value, words", [(0, "must be a finite number > 0"), (-1.0, "must be a finite number > 0"),
                                          ("0.5", "must be a finite number > 0")])
def test_bad_thresholds_are_refused_before_any_loop(value, words):
    with pytest.raises(jacobiscope.ArgumentError, match=words):
        run(two_mode_map(), torch.tensor([1.0, 1e-3], dtype=F64), 10, depth_safety_threshold=value)


def test_a_real_model_loop_forecasts_through_its_own_recurrence():
    """A tiny ALBERT's own loop (trained depth = its layer count): the forecast's first step is the Jacobian of
    the model's loop applied to its last step, compared with a finite difference of the loop."""
    import transformers

    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=4,
                                       num_attention_heads=2, intermediate_size=32)
    model = transformers.AlbertModel(config).to(F64).eval()
    ids = torch.randint(2, 60, (1, 5), generator=torch.Generator().manual_seed(1))
    looped = jacobiscope.native_loop(model, {"input_ids": ids})
    row = jacobiscope.measure(looped, looped.x0, loops=8, diagnostics=["depth_safety"])
    result = row.results["depth_safety"]
    assert result.trained_loop == 4 and result.trained_from == "info.loops"
    states = [looped.x0]
    with torch.no_grad():
        for _ in range(4):
            states.append(looped.step(states[-1]))
        delta, x = states[4] - states[3], states[4]
        h = 1e-6
        j_delta = (looped.step(x + h * delta) - looped.step(x - h * delta)) / (2 * h)
    assert result.displacement[0] == pytest.approx(float(j_delta.norm() / x.norm()), rel=1e-5)
    assert result.first_gain == pytest.approx(float(j_delta.norm() / delta.norm()), rel=1e-5)


def test_the_figure_draws_the_state_and_the_output_each_judged_where_it_is_judged():
    """Left panel: the state departure (forecast = the result's values, threshold line at the threshold); right:
    the output KL for a map with a readout, and a "no readout" note for one without."""
    pytest.importorskip("matplotlib")
    head = torch.tensor([[2.0, -1.0], [0.5, 3.0]], dtype=F64)
    with_readout = two_mode_map()
    with_readout.info.readout = lambda x: (x @ head).reshape(1, 2)
    rows = [run(two_mode_map(), torch.tensor([1.0, 1e-3], dtype=F64), 40, depth_safety_threshold=1.0),
            run(with_readout, torch.tensor([1.0, 1e-3], dtype=F64), 40, depth_safety_output_threshold=0.05)]
    state_only, judged_on_output = (row.results["depth_safety"] for row in rows)
    assert (state_only.judged_on, judged_on_output.judged_on) == ("state", "output")
    figure = jacobiscope.Report(rows).plot()["depth_safety"]
    state_ax, output_ax = figure.axes[:2]
    solid = [line for line in state_ax.get_lines() if line.get_linestyle() == "-"]
    assert list(solid[0].get_ydata()) == pytest.approx([min(v, 1e6) for v in state_only.displacement])
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in state_ax.get_lines())   # the threshold
    output_solid = [line for line in output_ax.get_lines() if line.get_linestyle() == "-"]
    assert len(output_solid) == 1   # only the row with a readout
    assert list(output_solid[0].get_ydata()) == pytest.approx(judged_on_output.output_divergence)
    assert list(output_solid[0].get_xdata())[0] == judged_on_output.trained_loop + judged_on_output.period
    assert output_ax.get_yscale() in ("log", "symlog") and output_ax.get_ylim()[0] >= 0


def test_the_html_caption_of_a_diagnostic_figure_is_its_own(tmp_path):
    pytest.importorskip("matplotlib")
    import html

    from jacobiscope.diagnostics import get_diagnostic

    row = run(two_mode_map(), torch.tensor([1.0, 1e-3], dtype=F64), 40)
    page = html.unescape(jacobiscope.Report([row]).save_html(tmp_path / "r.html").read_text())
    caption = get_diagnostic("depth_safety").figure_caption
    assert caption.startswith("Depth safety:") and f"<figcaption>{caption}</figcaption>" in page
