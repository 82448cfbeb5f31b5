import json
import os
import subprocess
import sys

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.hub import HubError, load_pretrained, prepare_for_hub, push_to_hub
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku

PUZZLES = torch.randint(0, 10, (2, 81), generator=torch.Generator().manual_seed(0))


def _saved(tmp_path, arch):
    torch.manual_seed(0)
    model = (ItrSAForSudoku(ItrSAConfig(hidden_size=16, num_heads=2, loops=2)) if arch == "itrsa"
             else AKOrNForSudoku(AKOrNConfig(hidden_size=16, num_heads=2, loops=2))).eval()
    folder = tmp_path / arch
    model.save_pretrained(folder)
    return model, folder


# suite time: one family in the default suite, the other under -m slow (the same prepare-and-load path)
@pytest.mark.parametrize("arch", ["itrsa", pytest.param("akorn", marks=pytest.mark.slow)])
def test_prepared_folder_loads_with_its_own_code(tmp_path, arch):
    model, folder = _saved(tmp_path, arch)
    prepared = prepare_for_hub(folder, tmp_path / "prepared")
    config = json.loads((prepared / "config.json").read_text())
    module = "itrsa" if arch == "itrsa" else "akorn"
    assert config["auto_map"]["AutoModel"] == f"modeling_{module}.{type(model).__name__}"
    assert (prepared / f"modeling_{module}.py").exists() and (prepared / f"configuration_{module}.py").exists()
    # A Hub user without jacobiscope: a fresh interpreter that never imports it loads the folder's own code.
    script = f"""
import sys, torch, transformers
model = transformers.AutoModel.from_pretrained({str(prepared)!r}, trust_remote_code=True)
assert "jacobiscope" not in sys.modules, "the remote code must not need jacobiscope"
kwargs = {{"generator": torch.Generator().manual_seed(3)}} if {arch == "akorn"} else {{}}
with torch.no_grad():
    torch.save(model(torch.load({str(tmp_path / 'puzzles.pt')!r}), **kwargs).logits, {str(tmp_path / 'logits.pt')!r})
print(type(model).__module__)
"""
    torch.save(PUZZLES, tmp_path / "puzzles.pt")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("transformers_modules")
    kwargs = {"generator": torch.Generator().manual_seed(3)} if arch == "akorn" else {}
    with torch.no_grad():
        assert torch.allclose(torch.load(tmp_path / "logits.pt"), model(PUZZLES, **kwargs).logits)


def test_load_pretrained_from_a_folder_and_bad_files(tmp_path):
    model, folder = _saved(tmp_path, "itrsa")
    loaded = load_pretrained(folder)
    with torch.no_grad():
        assert torch.equal(loaded(PUZZLES).logits, model(PUZZLES).logits)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(HubError, match="corrupt or truncated"):
        load_pretrained(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(HubError, match="no model.safetensors"):
        load_pretrained(folder)
    with pytest.raises(HubError, match="unknown checkpoint 'no-such-model'"):
        load_pretrained("no-such-model")


def test_push_prepares_and_uploads(tmp_path, monkeypatch):
    _, folder = _saved(tmp_path, "akorn")
    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private=False, exist_ok=False):
            calls["repo"] = (repo_id, private)

        def upload_folder(self, folder_path, repo_id, commit_message):
            from pathlib import Path

            calls["files"] = sorted(p.name for p in Path(folder_path).iterdir())
            return type("Info", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    url = push_to_hub(folder, "someone/akorn-sudoku", token="t")
    assert url.endswith("/commit/abc") and calls["repo"] == ("someone/akorn-sudoku", False)
    assert {"config.json", "model.safetensors", "modeling_akorn.py", "configuration_akorn.py"} <= set(calls["files"])
    assert "auto_map" not in json.loads((folder / "config.json").read_text())  # the source folder is untouched


def test_a_folder_still_being_shipped_is_not_a_checkpoint(tmp_path, monkeypatch):
    """`ship_checkpoint` writes <name>.staging and renames it when complete: until then (or if it was interrupted)
    the half-written folder must not be offered, or loaded, by name."""
    import jacobiscope.hub as hub

    for folder in ("itrsa-x", "itrsa-x.staging", "zoo/variant", "zoo/other.staging", ".hidden"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text("{}")
    monkeypatch.setattr(hub, "shipped_folder", lambda name: tmp_path)
    assert sorted(hub.shipped_checkpoints()) == ["itrsa-x", "zoo/variant"]


def test_a_looped_causal_lm_loads_with_its_head_and_other_models_as_before(tmp_path):
    """A looped LM's readout is its head (the lens and the task evaluation read through it): a folder saved from
    DoryForCausalLM loads as DoryForCausalLM with the saved head weights; a GPT-2 LM head model (not looped) still
    loads as the bare GPT2Model."""
    torch.manual_seed(0)
    config = transformers.DoryConfig(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=8, n_input_layers=1,
                                     n_output_layers=1, n_recurrent_loops=2)
    saved = transformers.DoryForCausalLM(config)
    saved.save_pretrained(tmp_path / "dory")
    loaded = jacobiscope.load_pretrained(tmp_path / "dory")
    assert type(loaded).__name__ == "DoryForCausalLM"
    assert torch.equal(loaded.lm_head.weight, saved.lm_head.weight)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=20,
                                                               bos_token_id=0, eos_token_id=0))
    gpt2.save_pretrained(tmp_path / "gpt2")
    assert type(jacobiscope.load_pretrained(tmp_path / "gpt2")).__name__ == "GPT2Model"


def test_bare_hub_ids_and_minilm_load_from_the_local_cache_only(tmp_path):
    """A canonical Hub id without an owner ('gpt2', 'bert-base-uncased') loads when the local cache holds it, and
    jacobiscope.analyze takes it by name; the same name uncached is an unknown checkpoint (nothing is fetched).
    Run in a fresh process whose HF_HUB_CACHE is a cache built here (huggingface_hub's own layout)."""
    snapshot = tmp_path / "hub" / "models--tiny-gpt" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--tiny-gpt" / "refs").mkdir()
    (tmp_path / "hub" / "models--tiny-gpt" / "refs" / "main").write_text("a" * 40)
    torch.manual_seed(0)
    saved = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50,
                                                           bos_token_id=0, eos_token_id=0))
    saved.save_pretrained(snapshot)
    code = (
        "import json, torch, jacobiscope\n"
        "m = jacobiscope.hub.load_pretrained('tiny-gpt')\n"
        "r = jacobiscope.analyze('tiny-gpt', torch.tensor([[1, 2, 3]]), layers=[0], loops=3, k=1,\n"
        "                        diagnostics=['lyapunov'], progress=False)\n"
        "try:\n"
        "    jacobiscope.hub.load_pretrained('tiny-gpt-2')\n"
        "    missing = 'loaded'\n"
        "except jacobiscope.errors.HubError as error:\n"
        "    missing = str(error)\n"
        "print(json.dumps({'sum': float(m.wte.weight.detach().double().sum()), 'class': type(m).__name__,\n"
        "                  'rows': len(r.rows), 'missing': missing}))\n")
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["class"] == "GPT2Model" and result["rows"] == 1
    assert result["sum"] == pytest.approx(float(saved.wte.weight.detach().double().sum()), rel=1e-12)
    assert result["missing"].startswith("unknown checkpoint 'tiny-gpt-2'") and "download=True" in result["missing"]
