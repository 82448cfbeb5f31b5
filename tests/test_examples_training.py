"""The two Trainer examples run as a user runs them (a fresh process, a few steps): the spectral penalty covers
exactly the linear maps of the blocks, counted here from the model itself, and the callbacks' numbers come out
finite; a run too short to log says so instead of raising."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")


def _run(script, tmp_path, *flags) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--output_dir", str(tmp_path / "out"), *flags],
                          env=ENV, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _linear_weights(model, blocks) -> int:
    """Weight matrices of the blocks' linear maps, a fused c_attn counting as its three parts (Q, K, V)."""
    count = 0
    for block in blocks:
        for name, module in block.named_modules():
            if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D":
                count += 3 if name.endswith("c_attn") else 1
    return count


def test_gpt2_example_regularizes_every_block_matrix_and_logs_the_penalty(tmp_path):
    out = _run("finetune_gpt2_spectral.py", tmp_path, "--max_steps", "4", "--logging_steps", "2", "--eval_steps", "2",
               "--n_layer", "3", "--n_embd", "32", "--n_head", "2")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=32,
                                                                 n_layer=3, n_head=2))
    expected = _linear_weights(model, model.transformer.h)
    assert f"[reg] spectral penalty on {expected} matrices" in out
    last = json.loads(out.strip().splitlines()[-1])
    assert last["step"] == 4 and last["spec_penalty"] > 0 and 0 < last["spec_sigma_max"] < 10

    short = _run("finetune_gpt2_spectral.py", tmp_path, "--max_steps", "2", "--eval_strategy", "no",
                 "--n_layer", "1", "--n_embd", "32", "--n_head", "2")
    assert "no penalty was logged: --logging_steps 10 exceeds the 2 steps run" in short


def test_itrsa_example_regularizes_the_attention_maps_and_measures_the_loop(tmp_path):
    out = _run("train_itrsa_spectral.py", tmp_path, "--max_steps", "4", "--logging_steps", "2", "--eval_steps", "2",
               "--save_steps", "4", "--train_size", "64", "--eval_size", "16", "--warmup_steps", "1")
    from jacobiscope.models import ItrSAConfig, ItrSAForSudoku

    model = ItrSAForSudoku(ItrSAConfig(hidden_size=32, num_heads=4, loops=8))
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)
             and name.startswith("attention")]
    assert f"[reg] spectral penalty on {names}" in out
    summary = json.loads(out[out.index("{\n"):])
    assert all(key in summary for key in ("eval_lyapunov_max", "eval_jacobian_norm"))
    assert summary["eval_lyapunov_max"] < 10 and summary["eval_jacobian_norm"] > 0
    assert 0 <= summary["eval_pseudo_energy_monotone_fraction"] <= 1
    assert (tmp_path / "out" / "checkpoint-4" / "model.safetensors").is_file()
