"""The README's remote-code block (Ouro or Huginn end to end) runs verbatim on the tiny mimics: `from_pretrained`
hands over the mimic and a character tokenizer (the real checkpoints need a download), everything after it is the
README's text, and what it computes is checked against the model's own forward."""
import re
from pathlib import Path

import pytest
import torch
import transformers

from mimics.huginn_mimic import RavenConfig, RavenForCausalLM
from mimics.ouro_mimic import OuroConfig, OuroForCausalLM

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- remote code: run on the mimics by tests/test_readme_remote_code.py -->"
CHARACTERS = " 0123456789+=,."


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape(MARKER) + r"\n```py\n(.*?)\n```\n", text, re.S)
    assert found, "the README lost its remote-code block (or its marker)"
    return found.group(1)


def char_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {character: index for index, character in enumerate(CHARACTERS)}
    vocab["<unk>"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


def ouro():
    config = OuroConfig(vocab_size=24, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, total_ut_steps=3)
    return OuroForCausalLM(config)


def huginn():
    config = RavenConfig(n_embd=16, n_heads=2, n_layers=4, vocab_size=24, intermediate_size=32,
                         n_layers_in_prelude=1, n_layers_in_recurrent_block=2, n_layers_in_coda=1, mean_recurrence=3)
    return RavenForCausalLM(config)


@pytest.mark.slow   # 20-40 s each: analyze runs the Lyapunov spectrum of both inputs
@pytest.mark.parametrize("family, build", [("ouro", ouro), ("huginn", huginn)])
def test_the_readme_remote_code_block_runs_on_the_mimic(family, build, monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = build()
    loaded = []

    def load_model(name, trust_remote_code=False, **_):
        assert trust_remote_code, "the README must show trust_remote_code=True"
        loaded.append(name)
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name, **_: char_tokenizer())
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(readme_block(), "README.md remote-code block", "exec"), namespace)
    assert loaded == ["ByteDance/Ouro-1.4B"]
    lens, inputs, configured = namespace["lens"], namespace["inputs"], namespace["configured"]
    assert configured == 3 and lens.loops == 12
    if family == "ouro":   # Ouro is deterministic: the lens at the configured depth is the model's own logits
        with torch.no_grad():
            own = model(**inputs).logits
        assert float((namespace["logits"] - own).abs().max()) < 1e-4
    assert torch.isfinite(lens.logits(lens.loops)).all()
    assert (tmp_path / "lens.png").read_bytes()[:4] == b"\x89PNG"
    assert len(namespace["report"].rows) == 2 and len(namespace["frame"]) == 2 * inputs["input_ids"].shape[1] * 13
    patched = namespace["patched"]
    # input 0 continued from input 1's state at loop 2: the state handed over is input 1's at loop 2 in the same run
    # (the baseline; Huginn draws a new random initial state per run, so not the lens above's)
    assert torch.allclose(patched.state(2, input=0), patched.baseline.state(2, input=1), atol=1e-5)
    assert not torch.allclose(patched.baseline.state(2, input=0), patched.baseline.state(2, input=1), atol=1e-3)
