"""Bad inputs to analyze / describe and the adapters: each gets jacobiscope's own exception with a one-line message
naming the problem and the fix, or a row carrying an explicit flag; never a torch or transformers traceback, never a
silently empty or wrong report.

One case per bad input. Real parts only: tiny transformers models built from configs in code, a word-level tokenizer
built in code, the reference Sudoku solver at a tiny size.
"""
import math

import pytest
import torch
import transformers as T

import jacobiscope
from jacobiscope.adapters import AdapterError, InputError
from jacobiscope.errors import ArgumentError, HubError, MemoryBudgetError

from hf_models import tiny_configs, tiny_inputs, tiny_model

IDS = torch.tensor([[5, 17, 9, 33, 2, 41]])
RUN = dict(loops=2, diagnostics=["lyapunov"], k=1, progress=False)  # the cheapest analyze that measures


@pytest.fixture(scope="module")
def gpt2():
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def vit():
    return tiny_model("vit")


@pytest.fixture(scope="module")
def albert():
    torch.manual_seed(0)
    config = T.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                            num_attention_heads=2, intermediate_size=32)
    return T.AlbertModel(config).eval()


@pytest.fixture(scope="module")
def tokenizer():
    """A word-level tokenizer over the tiny models' 60 ids: "w0".."w57" are ids 2..59."""
    import tokenizers
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["[PAD]", "[UNK]"] + [f"w{i}" for i in range(58)]
    backend = tokenizers.Tokenizer(WordLevel({word: i for i, word in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return T.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")


def _short_gpt2():
    """GPT-2 with 8 learned positions: a longer input indexes past its position table."""
    torch.manual_seed(0)
    return T.GPT2Model(T.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=60, n_positions=8)).eval()


def _missing_cuda():
    # on a machine with CUDA, an ordinal it does not have is the same mistake
    return "cuda:99" if torch.cuda.is_available() else "cuda"


# ----------------------------------------------------------------------------------------------- analyze: errors
# (inputs, keyword arguments, exception, the key words of its message)
ANALYZE_ERRORS = {
    # the inputs
    "mask-key-misspelled": ({"input_ids": IDS, "attn_mask": torch.ones_like(IDS)}, {}, InputError,
                            r"'attn_mask'.*does not take.*did you mean 'attention_mask'.*input_ids, attention_mask"),
    "token-id-above-vocabulary": (torch.tensor([[1, 2, 60, 99]]), {}, InputError,
                                  r"token id 99 is outside the vocabulary of GPT2Model \(ids 0..59\).*pass ids below 60"),
    "token-id-negative": (torch.tensor([[1, -2, 3]]), {}, InputError, r"token id -2 is outside the vocabulary"),
    "ids-3d": (torch.randint(2, 60, (1, 4, 2)), {}, InputError, r"input_ids must be \[batch, tokens\], got shape \(1, 4, 2\)"),
    "ids-float-in-mapping": ({"input_ids": IDS.float()}, {}, InputError, r"integer token ids.*float32.*ids.long\(\)"),
    "ids-float-tensor": (IDS.float(), {}, InputError, r"float tensor of shape \(1, 6\).*pass ids.long\(\)"),
    "ids-bool-tensor": (torch.ones(1, 3, dtype=torch.bool), {}, InputError, r"torch.bool tensor is neither.*\.long\(\)"),
    "ids-0d-tensor": (torch.tensor(3), {}, InputError, r"0-d tensor.*\[batch, tokens\]"),
    "ids-empty-tensor": (torch.zeros(0, 4, dtype=torch.long), {}, InputError, r"empty.*at least one"),
    "mask-all-zeros": ({"input_ids": IDS, "attention_mask": torch.zeros_like(IDS)}, {}, InputError,
                       r"Example 0 has an all-zero attention mask.*mark its tokens with 1"),
    "mask-wrong-length": ({"input_ids": IDS, "attention_mask": torch.ones(1, 3, dtype=torch.long)}, {}, InputError,
                          r"attention_mask has shape \(1, 3\) but the inputs are \(1, 6\).*one mask entry per token"),
    "mask-wrong-batch": ({"input_ids": torch.cat([IDS, IDS]), "attention_mask": torch.ones(1, 6, dtype=torch.long)},
                         {}, InputError, r"attention_mask has shape \(1, 6\) but the inputs are \(2, 6\)"),
    "mask-additive": ({"input_ids": IDS, "attention_mask": torch.tensor([[0.0, 0, 0, 0, -1e4, -1e4]])}, {}, InputError,
                      r"must hold 1 \(token\) and 0 \(padding\).*not an additive one"),
    "mapping-without-input-ids": ({"attention_mask": torch.ones_like(IDS)}, {}, InputError,
                                  r"no 'input_ids' \(keys: \['attention_mask'\]\).*pass \{'input_ids'"),
    "mapping-empty": ({}, {}, InputError, r"no tensors.*pass e.g."),
    "inputs-none": (None, {}, InputError, r"Unsupported inputs of type NoneType: pass text"),
    "text-empty-string": ("", {}, InputError, r"Text number 0 is empty"),
    "text-whitespace": ("   ", {}, InputError, r"Text number 0 is empty"),
    "text-empty-list": ([], {}, InputError, r"list of texts is empty: pass at least one"),
    "list-mixing-text-and-ints": (["w1 w2", 3], {}, InputError, r"mixes text and other inputs \(item 1 is a int\)"),
    "list-of-ints": ([5, 17, 9], {}, InputError, r"list of ints is ambiguous.*torch.tensor\(\[ids\]\)"),
    "text-without-tokenizer": ("w1 w2", {}, InputError, r"need a tokenizer.*Pass tokenizer="),
    "tokenizer-is-a-string": ("w1 w2", {"tokenizer": "gpt2"}, InputError,
                              r"tokenizer must be a tokenizer object, got str 'gpt2'.*AutoTokenizer"),
    "max-length-zero": ("w1 w2", {"max_length": 0}, ArgumentError, r"max_length must be a positive int or None, got 0"),
    "pixels-to-a-text-model": (torch.randn(1, 3, 8, 8), {}, InputError,
                               r"read as pixel values.*GPT2Model's forward does not take.*input_ids"),
    "hidden-states-with-nan": (torch.full((1, 4, 16), float("nan")), {}, InputError, r"NaN or Inf \(64 entries\).*finite"),
    "hidden-states-wrong-width": (torch.randn(1, 4, 7), {}, InputError, r"D=7 differs from.*hidden_size=16.*\[B, S, 16\]"),
    # the layers
    "layers-empty": (IDS, {"layers": []}, ArgumentError, r"layers is empty.*pass None for all 3 blocks"),
    "layer-out-of-range": (IDS, {"layers": [5]}, AdapterError, r"layer 5 is out of range.*\(0..2\).*pass 0..2"),
    "layer-negative-out-of-range": (IDS, {"layers": [-4]}, AdapterError, r"layer -4 is out of range"),
    "layers-duplicate": (IDS, {"layers": [0, 0]}, ArgumentError, r"names block 0 more than once \(0, 0\).*once"),
    "layers-duplicate-negative": (IDS, {"layers": [0, -3]}, ArgumentError, r"names block 0 more than once \(0, -3\)"),
    "layer-float": (IDS, {"layers": [1.0]}, ArgumentError, r"int block indices, got float 1.0.*layers=\[0, 2\]"),
    "layers-string": (IDS, {"layers": "0"}, ArgumentError, r"got str '0' \(for all blocks pass layers=None\)"),
    "layer-bool": (IDS, {"layers": [True]}, ArgumentError, r"got bool True"),
    # the loop and the diagnostics
    "loops-zero": (IDS, {"loops": 0}, ArgumentError, r"loops must be a positive int, got 0"),
    "loops-negative": (IDS, {"loops": -3}, ArgumentError, r"loops must be a positive int, got -3"),
    "loops-float": (IDS, {"loops": 2.5}, ArgumentError, r"loops must be a positive int, got 2.5"),
    "loops-huge": (IDS, {"loops": 10**12}, MemoryBudgetError, r"loops=1000000000000 keeps.*GB.*lower loops"),
    "mode-unknown": (IDS, {"mode": "blocks"}, ArgumentError, r"mode must be 'block', 'attention' or 'loop', got 'blocks'"),
    "eta-zero": (IDS, {"mode": "attention", "eta": 0}, ArgumentError, r"eta must be a finite number > 0, got 0"),
    "eta-negative": (IDS, {"mode": "attention", "eta": -1.0}, ArgumentError, r"eta must be a finite number > 0, got -1"),
    "eta-nan": (IDS, {"mode": "attention", "eta": float("nan")}, ArgumentError, r"finite number > 0, got nan"),
    "eta-inf": (IDS, {"mode": "attention", "eta": float("inf")}, ArgumentError, r"finite number > 0, got inf"),
    "eta-string": (IDS, {"mode": "attention", "eta": "1"}, ArgumentError, r"finite number > 0, got '1'"),
    "eta-in-block-mode": (IDS, {"eta": 0.5}, ArgumentError, r"mode='block' would ignore eta=0.5.*drop eta"),
    "k-zero": (IDS, {"k": 0}, ArgumentError, r"^k must be a positive int, got 0"),
    "eigen-k-zero": (IDS, {"eigen_k": 0}, ArgumentError, r"eigen_k must be a positive int, got 0"),
    "spectral-samples-zero": (IDS, {"spectral_samples": 0}, ArgumentError, r"spectral_samples must be a positive int"),
    "eigen-restarts-negative": (IDS, {"eigen_restarts": -1}, ArgumentError, r"eigen_restarts must be a non-negative int"),
    "seed-string": (IDS, {"seed": "0"}, ArgumentError, r"seed must be a non-negative int, got '0'"),
    "diagnostics-unknown": (IDS, {"diagnostics": ["lyapunovv"]}, ArgumentError, r"Unknown diagnostics \['lyapunovv'\]"),
    "diagnostics-empty": (IDS, {"diagnostics": []}, ArgumentError, r"diagnostics is empty.*pass None"),
    "diagnostics-not-a-list": (IDS, {"diagnostics": 5}, ArgumentError, r"diagnostics must be a list of names, got int"),
    "input-labels-too-many": (IDS, {"input_labels": ["a", "b"]}, ArgumentError, r"input_labels has 2 names for 1 inputs"),
    "input-labels-a-string": (IDS, {"input_labels": "a"}, ArgumentError, r"input_labels must be a list.*pass e.g. \['a'\]"),
    "dtype-string": (IDS, {"dtype": "float64"}, ArgumentError, r"dtype must be a floating torch dtype, got 'float64'"),
    "dtype-integer": (IDS, {"dtype": torch.int64}, ArgumentError, r"dtype must be a floating torch dtype, got torch.int64"),
    "device-missing-cuda": (IDS, {"device": _missing_cuda()}, ArgumentError, r"is not available on this machine.*'cpu'"),
    "device-not-a-name": (IDS, {"device": "gpu0"}, ArgumentError, r"device='gpu0' is not a device name"),
    "device-meta": (IDS, {"device": "meta"}, ArgumentError, r"device='meta' holds no numbers"),
    "recurrence-without-one": (IDS, {"recurrence": "loop"}, ArgumentError, r"recurrence='loop'.*mode='block'.*drop recurrence"),
    "mode-loop-without-recurrence": (IDS, {"mode": "loop"}, ArgumentError, r"mode='loop' needs a model with a recurrence"),
}


@pytest.mark.parametrize("case", list(ANALYZE_ERRORS), ids=list(ANALYZE_ERRORS))
def test_analyze_names_the_bad_input_and_the_fix(case, gpt2):
    inputs, kwargs, error, match = ANALYZE_ERRORS[case]
    with pytest.raises(error, match=match):
        jacobiscope.analyze(gpt2, inputs, **{**RUN, **kwargs})


def test_text_longer_than_the_learned_positions_says_the_max_length(tokenizer):
    text = " ".join(f"w{i}" for i in range(12))
    with pytest.raises(InputError, match=r"12 tokens, more than the 8 positions GPT2Model learned — pass max_length=8"):
        jacobiscope.analyze(_short_gpt2(), text, tokenizer=tokenizer, **RUN)
    report = jacobiscope.analyze(_short_gpt2(), text, tokenizer=tokenizer, max_length=8, **RUN)  # the fix works
    assert [row.state_shape for row in report.rows] == [[8, 16], [8, 16]]


def test_token_ids_longer_than_the_learned_positions():
    with pytest.raises(InputError, match=r"12 tokens, more than the 8 positions.*ids\[:, :8\]"):
        jacobiscope.analyze(_short_gpt2(), torch.randint(2, 60, (1, 12)), **RUN)


def test_a_tokenizer_without_a_pad_token_is_named(tokenizer):
    import copy

    unpadded = copy.deepcopy(tokenizer)
    unpadded.pad_token = None
    with pytest.raises(InputError, match=r"tokenizer failed.*pad_token = tokenizer.eos_token"):
        jacobiscope.analyze(tiny_model("gpt2"), ["w1 w2", "w3"], tokenizer=unpadded, **RUN)


def test_vision_model_given_token_ids(vit):
    with pytest.raises(InputError, match=r"integer tensor is read as token ids.*ViTModel's forward does not take — "
                                         r"pass what it takes: pixel_values"):
        jacobiscope.analyze(vit, IDS, **RUN)


@pytest.mark.parametrize("pixels, match", [
    (torch.randn(1, 1, 8, 8), r"ViTModel's own forward failed.*channel dimension.*check that the inputs"),
    (torch.randn(1, 3, 9, 9), r"ViTModel's own forward failed.*Input image size \(9\*9\) doesn't match model \(8\*8\)"),
], ids=["image-wrong-channels", "image-wrong-size"])
def test_the_models_own_refusal_comes_as_one_line(vit, pixels, match):
    with pytest.raises(InputError, match=match) as caught:
        jacobiscope.analyze(vit, pixels, **RUN)
    assert caught.value.__cause__ is None and isinstance(caught.value.original, ValueError)


def test_a_model_whose_own_forward_fails_inside_its_first_block_is_named_not_the_map():
    """GPT-J with 4-wide heads and its default rotary_dim of 64: the capture stops before the failing code, so the
    replayed block fails first — on the model's own hidden state. The model's own forward fails the same way: the
    error names the model and its config, not a step the user never wrote."""
    model = T.GPTJModel(T.GPTJConfig(n_embd=16, n_layer=2, n_head=4, vocab_size=60)).eval()
    with pytest.raises(RuntimeError, match="must match the size of tensor b") as own:
        model(IDS)
    with pytest.raises(InputError, match=r"GPTJModel's own forward failed on these inputs \(RuntimeError: The size of "
                                         r"tensor a \(4\) must match.*a config whose sizes disagree") as caught:
        jacobiscope.analyze(model, IDS, **RUN)
    assert str(own.value).splitlines()[0][:200] in str(caught.value) and caught.value.__cause__ is None
    agreeing = T.GPTJModel(T.GPTJConfig(n_embd=16, n_layer=2, n_head=4, rotary_dim=4, vocab_size=60)).eval()
    assert len(jacobiscope.analyze(agreeing, IDS, layers=[0], **RUN).rows) == 1  # its sizes agreeing: measured


@pytest.mark.parametrize("model, match", [
    ("gpt2", r"unknown checkpoint 'gpt2'.*not a Hub repo id in the local cache.*download=True"),  # a name loads
    (torch.nn.Linear(16, 16), r"Linear is not a transformers model \(no config\).*jacobiscope.measure"),
], ids=["model-is-a-string", "model-without-blocks"])
def test_not_a_model(model, match):
    with pytest.raises((ArgumentError, AdapterError, HubError), match=match):
        jacobiscope.analyze(model, torch.randn(1, 4, 16), **RUN)


def test_model_on_the_meta_device():
    with torch.device("meta"):
        model = T.GPT2Model(tiny_configs()["gpt2"])
    with pytest.raises(AdapterError, match="meta device"):
        jacobiscope.analyze(model, IDS, **RUN)


# --------------------------------------------------------------------------------------- a model's own loop
ALBERT_ERRORS = {
    "recurrence-unknown": ({"recurrence": "nope"}, AdapterError, r"AlbertModel has no recurrence 'nope' — it offers loop"),
    "layers-in-loop-mode": ({"layers": [2]}, ArgumentError, r"layers=\[2\] selects blocks.*pass mode='block'"),
    "eta-in-loop-mode": ({"eta": 2.0}, ArgumentError, r"mode='loop' would ignore eta=2.0"),
    "recurrence-in-block-mode": ({"mode": "block", "recurrence": "loop"}, ArgumentError,
                                 r"recurrence='loop'.*mode='block'.*drop recurrence or pass mode='loop'"),
}


@pytest.mark.parametrize("case", list(ALBERT_ERRORS), ids=list(ALBERT_ERRORS))
def test_loop_mode_arguments(case, albert):
    kwargs, error, match = ALBERT_ERRORS[case]
    with pytest.raises(error, match=match):
        jacobiscope.analyze(albert, IDS, **{**RUN, **kwargs})


def test_a_looped_family_runs_every_default_diagnostic(albert):
    # The state of a model's own loop keeps its batch axis of one: the cluster order parameters used to crash on it.
    report = jacobiscope.analyze(albert, IDS, loops=3, k=1, eigen_k=2, progress=False)
    (row,) = report.rows
    assert row.mode == "loop" and not row.flags
    assert len(row.clusters["effective_clusters"]) == 4 and all(isinstance(c, int) for c in row.clusters["cluster_count"])


@pytest.fixture(scope="module")
def solver():
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku

    torch.manual_seed(0)
    return ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=3)).eval()


SOLVER_ERRORS = {
    "mode-block-on-a-loop-map": (["0" * 81], {"mode": "block"}, ArgumentError,
                                 r"measured through its own loop_map.*mode='block' does not apply"),
    "layers-on-a-loop-map": (["0" * 81], {"layers": [1]}, ArgumentError, r"layers=\[1\] selects blocks.*drop layers$"),
    "recurrence-on-a-loop-map": (["0" * 81], {"recurrence": "H"}, ArgumentError, r"recurrence='H' does not exist"),
    "puzzle-too-short": (["123"], {}, InputError, r"loop_inputs rejected the inputs: Puzzle 0 must be 81 characters"),
    "puzzles-none": ([], {}, InputError, r"No inputs given to ItrSAForSudoku"),
}


@pytest.mark.parametrize("case", list(SOLVER_ERRORS), ids=list(SOLVER_ERRORS))
def test_reference_solver_arguments(case, solver):
    inputs, kwargs, error, match = SOLVER_ERRORS[case]
    with pytest.raises(error, match=match):
        jacobiscope.analyze(solver, inputs, **{**RUN, **kwargs})


# --------------------------------------------------------------------------------------- flagged rows, not errors
def test_inf_weights_in_one_block_keep_the_other_layers_and_flag_the_broken_ones():
    model = tiny_model("gpt2")
    with torch.no_grad():
        model.h[1].mlp.c_fc.weight.fill_(float("inf"))  # layer 1 overflows at its first loop; layer 2 starts on Inf
    report = jacobiscope.analyze(model, tiny_inputs("gpt2"), loops=3, k=2, eigen_k=2, progress=False)
    rows = {row.layer: row for row in report.rows}
    assert set(rows) == {0, 1, 2}
    assert not rows[0].flags and math.isfinite(rows[0].lyapunov["exponents"][0])
    assert rows[1].flags == ["NaN/Inf at loop 1"] and rows[1].regime == "diverging"
    assert rows[2].flags[0].startswith("NaN/Inf at loop 0: the state entering layer 2 has 96 non-finite entries")
    assert rows[2].regime == "unknown" and rows[2].lyapunov is None and len(rows[2].state_norm) == 4
    assert "NaN/Inf at loop 0" in report.summary()
    assert jacobiscope.Report.from_dict(report.to_dict()).rows == report.rows  # the flagged row travels


def test_a_huge_eta_keeps_every_row_and_flags_the_loop():
    report = jacobiscope.analyze(tiny_model("gpt2"), tiny_inputs("gpt2"), mode="attention", eta=1e38, loops=3, k=2,
                                 eigen_k=2, progress=False)
    assert [row.layer for row in report.rows] == [0, 1, 2]
    assert all(row.flags[0] == "NaN/Inf at loop 1" and row.regime == "diverging" for row in report.rows)


def test_a_derivative_that_overflows_while_the_states_stay_finite_is_flagged():
    # Llama's RMSNorm maps the overflowed sum back to finite states, but its Jacobian there is NaN.
    report = jacobiscope.analyze(tiny_model("llama"), tiny_inputs("llama"), mode="attention", eta=1e38, layers=[0],
                                 loops=3, k=2, eigen_k=2, progress=False)
    (row,) = report.rows
    assert all(math.isfinite(value) for value in row.state_norm)
    assert ("Jacobian NaN/Inf at loop 0 (the states stay finite) — the results that use it are NaN; "
            "compute in float64 (dtype=torch.float64) or check the weights") in row.flags
    # the norm maps the overflowed sum to zero tokens: the cluster order parameters are NaN there, flagged with
    # that cause, never plain numbers
    assert all(flag.startswith(("Jacobian NaN/Inf", "clusters: every token is zero")) for flag in row.flags), row.flags


@pytest.mark.parametrize("diagnostic", jacobiscope.list_diagnostics())
def test_each_diagnostic_copes_with_a_trajectory_finite_only_at_loop_0(diagnostic, gpt2):
    report = jacobiscope.analyze(gpt2, IDS, mode="attention", eta=1e38, layers=[0], loops=3, k=2, eigen_k=2,
                                 diagnostics=[diagnostic], progress=False)
    (row,) = report.rows
    assert row.flags[0] == "NaN/Inf at loop 1" and math.isfinite(row.state_norm[0])
    assert all(math.isnan(value) for value in row.state_norm[1:])


# --------------------------------------------------------------------------------------- wrappers
class _DDPLike(torch.nn.Module):
    """What DistributedDataParallel looks like from outside (it needs a process group to be built): the model in
    ``.module``, no config, a forward that passes through."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


@pytest.mark.parametrize("wrap", [torch.nn.DataParallel, _DDPLike], ids=["DataParallel", "DDP-like-module"])
def test_a_wrapped_model_is_unwrapped_in_attention_mode(wrap, gpt2):
    direct = jacobiscope.analyze(gpt2, IDS, mode="attention", layers=[1], **RUN)
    report = jacobiscope.analyze(wrap(gpt2), IDS, mode="attention", layers=[1], **RUN)
    assert report.rows[0].lyapunov["exponents"] == pytest.approx(direct.rows[0].lyapunov["exponents"])
    assert report.notes[0] == f"{wrap.__name__} wrapper unwrapped: measured its inner GPT2Model (same weights)"
    assert report.provenance["model_class"] == "GPT2Model"


def test_describe_and_looped_block_and_check_adapter_unwrap_too(gpt2):
    wrapped = torch.nn.DataParallel(gpt2)
    assert [plan.layer for plan in jacobiscope.describe(wrapped, IDS, layers=[0], loops=2)] == [0]
    assert jacobiscope.looped_block(wrapped, IDS, 0).x0.shape == (1, 6, 16)
    result = jacobiscope.check_adapter(wrapped, modes=("block",))
    assert result.passed and "DataParallel wrapper unwrapped" in result.checks[0][2]


# --------------------------------------------------------------------------------------- describe
DESCRIBE_ERRORS = {
    "loops-zero": (IDS, {"loops": 0}, ArgumentError, r"loops must be a positive int"),
    "k-zero": (IDS, {"k": 0}, ArgumentError, r"^k must be a positive int"),
    "layers-empty": (IDS, {"layers": []}, ArgumentError, r"layers is empty"),
    "layers-duplicate": (IDS, {"layers": [1, -2]}, ArgumentError, r"names block 1 more than once"),
    "layer-out-of-range": (IDS, {"layers": [3]}, AdapterError, r"layer 3 is out of range"),
    "mode-unknown": (IDS, {"mode": "attn"}, ArgumentError, r"mode must be 'block', 'attention' or 'loop'"),
    "recurrence-without-one": (IDS, {"recurrence": "loop"}, ArgumentError, r"drop recurrence"),
    "diagnostics-unknown": (IDS, {"diagnostics": ["nope"]}, ArgumentError, r"Unknown diagnostics \['nope'\]"),
    "mask-key-misspelled": ({"input_ids": IDS, "attn_mask": torch.ones_like(IDS)}, {}, InputError, r"'attn_mask'"),
    "token-id-above-vocabulary": (torch.tensor([[1, 99]]), {}, InputError, r"token id 99 is outside the vocabulary"),
    "text-empty-string": ("", {}, InputError, r"Text number 0 is empty"),
    "pixels-to-a-text-model": (torch.randn(1, 3, 8, 8), {}, InputError, r"read as pixel values"),
}


@pytest.mark.parametrize("case", list(DESCRIBE_ERRORS), ids=list(DESCRIBE_ERRORS))
def test_describe_names_the_same_bad_inputs(case, gpt2):
    inputs, kwargs, error, match = DESCRIBE_ERRORS[case]
    with pytest.raises(error, match=match):
        jacobiscope.describe(gpt2, inputs, **{"loops": 2, **kwargs})


def test_describe_on_a_model_with_inf_weights_still_plans_every_layer():
    model = tiny_model("gpt2")
    with torch.no_grad():
        model.h[1].mlp.c_fc.weight.fill_(float("inf"))
    plans = jacobiscope.describe(model, IDS, loops=2, diagnostics=["lyapunov"])
    assert [plan.layer for plan in plans] == [0, 1, 2]
    # layer 2 starts from the inf layer 1 made: priced as it is, nothing recorded on a non-finite state
    assert plans[2].product_path == "eager" and plans[2].recording_seconds == 0.0
    assert all(math.isfinite(plan.estimated_seconds) for plan in plans)


# --------------------------------------------------------------------------------------- check_adapter
def test_check_adapter_on_mamba_reads_its_hidden_states_right():
    # Mamba records each block's OUTPUT in hidden_states (no embedding entry): not a failed adapter.
    torch.manual_seed(0)
    model = T.MambaModel(T.MambaConfig(vocab_size=60, hidden_size=16, state_size=4, num_hidden_layers=3, expand=2,
                                       conv_kernel=2)).eval()
    result = jacobiscope.check_adapter(model, modes=("block",))
    assert result.passed
    assert ("layer 1: is the model's layer 1", True,
            "its output is hidden_states[1] (this family records each block's output)") in result.checks


def test_check_adapter_on_t5_checks_the_encoder_blocks_on_the_encoder():
    torch.manual_seed(0)
    model = T.T5Model(T.T5Config(vocab_size=60, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=2,
                                 decoder_start_token_id=0)).eval()
    result = jacobiscope.check_adapter(model)  # the full T5 forward would need decoder_input_ids
    assert result.passed
    assert result.checks[0][2] == ("2 x T5Block at 'encoder.block' (the encoder's blocks, checked on the encoder's "
                                   "own forward)")


@pytest.mark.parametrize("inputs, layers, error, match", [
    ({"input_ids": IDS, "attn_mask": torch.ones_like(IDS)}, None, InputError, r"did you mean 'attention_mask'"),
    (None, [9], AdapterError, r"layer 9 is out of range: the model has 3 blocks"),
    (torch.tensor([[1, 99]]), None, InputError, r"token id 99 is outside the vocabulary"),
], ids=["check-mask-key-misspelled", "check-layer-out-of-range", "check-token-id-above-vocabulary"])
def test_check_adapter_bad_inputs(gpt2, inputs, layers, error, match):
    with pytest.raises(error, match=match):
        jacobiscope.check_adapter(gpt2, inputs, layers=layers)


# --------------------------------------------------------------------------------------- regressions: fine inputs
def test_good_inputs_that_look_odd_still_work(gpt2, tokenizer):
    one_dim = jacobiscope.analyze(gpt2, IDS[0], layers=[-1], **RUN)  # 1-D ids, a negative layer
    assert [row.layer for row in one_dim.rows] == [2]
    indices = jacobiscope.analyze(gpt2, IDS, layers=torch.tensor([0, 1]), **RUN)  # a tensor of layer indices
    assert [row.layer for row in indices.rows] == [0, 1]
    padded = jacobiscope.analyze(gpt2, ["w1 w2 w3", "w4"], tokenizer=tokenizer, layers=[0], **RUN)
    assert [row.state_shape for row in padded.rows] == [[3, 16], [1, 16]]  # padding removed, mask read right


def test_a_loop_map_model_takes_a_batch_mapping_as_a_training_loop_holds_it(solver):
    ids = solver.loop_inputs(["0" * 81])
    from_mapping = jacobiscope.analyze(solver, {"input_ids": ids, "labels": ids}, **RUN)
    from_tensor = jacobiscope.analyze(solver, ids, **RUN)
    assert from_mapping.rows[0].lyapunov["exponents"] == pytest.approx(from_tensor.rows[0].lyapunov["exponents"])


@pytest.mark.parametrize("mode", ["block", "attention"])
def test_a_model_that_cannot_run_its_own_block_is_named_not_torch(mode):
    """A config whose key/value head count does not divide (StableLM's default of 32 kv heads with 4 heads): the
    model's own forward fails inside sdpa; analyze says so: the model's own forward fails (block mode, replayed
    from the model's own call), or its layer does on the inputs the model gave it (attention mode)."""
    config = T.StableLmConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                              vocab_size=100)
    model = T.StableLmModel(config).eval()
    with pytest.raises(RuntimeError):
        model(input_ids=IDS)  # the model itself: torch's error
    expected = ((InputError, "StableLmModel's own forward failed.*a config whose sizes") if mode == "block" else
                (jacobiscope.errors.StepError, "StableLm.*check that the model itself runs on these inputs"))
    with pytest.raises(expected[0], match=expected[1]) as caught:
        jacobiscope.analyze(model, {"input_ids": IDS}, mode=mode, layers=[0], **RUN)
    assert "must match the size" in str(caught.value)
