"""jacobiscope.training: regularizers against independent references, the trainer's gradient-accumulation, resume and
multi-process behaviour, and the monitoring callbacks. Tiny models (hidden 8-16, 2 loops) keep it fast."""
import copy
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.data import sudoku
from jacobiscope.errors import ArgumentError
from jacobiscope.models import AKOrNConfig, AKOrNForSudoku, ItrSAConfig, ItrSAForSudoku
from jacobiscope.training import (
    JacobianRegularizer,
    LyapunovCallback,
    PseudoEnergyCallback,
    SpectralRegTrainer,
    SpectralRegTrainingArguments,
    SpectralRegularizer,
    energy_penalty,
    jacobian_spectral_penalty,
    spectral_penalty,
    spectral_targets,
)
from jacobiscope.training.trainer import SPECTRAL_STATE_NAME

transformers.logging.set_verbosity_error()


# ---------------------------------------------------------------------------------------------- helpers
def itrsa(dtype=torch.float64, **overrides):
    torch.manual_seed(0)
    config = dict(hidden_size=16, num_heads=2, loops=2, attention_bias=True, initializer_range=0.3)
    config.update(overrides)
    model = ItrSAForSudoku(ItrSAConfig(**config)).to(dtype)
    with torch.no_grad():  # biases start at zero; make the bias term of the penalty non-trivial
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0.0, 0.3)
    return model


def sudoku_rows(n, seed=0):
    return sudoku.relabelled_rows(n, seed)


def tiny_gpt2(dtype=torch.float64):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=50, n_positions=16, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).to(dtype)


def make_trainer(model, data, out, trainer_class=SpectralRegTrainer, lr=0.1, **options):
    settings = dict(output_dir=str(out), report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no",
                    logging_steps=1, max_steps=1, seed=0, dataloader_num_workers=0, max_grad_norm=0.0)
    settings.update(options)
    args = SpectralRegTrainingArguments(**settings)
    # Plain SGD with a constant rate: the update is exactly -lr * gradient, so parameters compare gradients.
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return trainer_class(model=model, args=args, train_dataset=data, optimizers=(optimizer, schedule))


def assert_same_parameters(a, b, rtol=1e-10, atol=1e-12):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def max_difference(a, b):
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters()))


# ---------------------------------------------------------------------------------------------- weight penalty
def test_weight_penalty_matches_independent_matrix_norms():
    model = itrsa()
    attention = model.attention
    expected = 0.0
    for layer in (attention.query, attention.key, attention.value, attention.output):
        sigma = torch.linalg.matrix_norm(layer.weight.detach(), 2)
        expected += float((sigma**2 - 1) ** 2) + float(layer.bias.detach().square().sum() ** 2)
    assert spectral_penalty(model).item() == pytest.approx(expected, rel=1e-12)
    result = SpectralRegularizer(model, exact=True)()
    assert result.penalty.item() == pytest.approx(expected, rel=1e-12)
    assert result.bias_term.item() > 0
    without_biases = SpectralRegularizer(model, exact=True, include_biases=False)()
    assert without_biases.penalty.item() == pytest.approx(result.weight_term.item(), rel=1e-12)


def test_power_iteration_converges_across_steps_with_persistent_vectors():
    model = itrsa()
    exact = SpectralRegularizer(model, exact=True).sigmas(exact=True)
    persistent = SpectralRegularizer(model, init_iterations=0)
    errors = []
    for _ in range(250):  # the slowest of these four weights has sigma_2 / sigma_1 = 0.97
        sigmas = persistent().sigmas
        errors.append(max(abs(float(sigmas[n]) - exact[n]) / exact[n] for n in exact))
    assert errors[0] > 1e-2                           # one iteration from a random start is far off ...
    assert errors[0] > errors[10] > errors[100] > errors[-1]
    assert errors[-1] < 1e-12                         # ... the kept vectors converge across steps
    fresh = [max(abs(float(s) - exact[n]) / exact[n] for n, s in SpectralRegularizer(model, init_iterations=0)().sigmas.items())
             for _ in range(3)]
    assert min(fresh) > 1e-3          # without persistence every step is a first iteration
    # the penalty with converged vectors equals the exact penalty
    assert persistent().penalty.item() == pytest.approx(spectral_penalty(model).item(), rel=1e-8)
    # and its gradient too (u v^T is the gradient of sigma_max once u, v converged)
    model.zero_grad()
    persistent().penalty.backward()
    power_gradient = model.attention.query.weight.grad.clone()
    model.zero_grad()
    spectral_penalty(model).backward()
    torch.testing.assert_close(power_gradient, model.attention.query.weight.grad, rtol=1e-6, atol=1e-10)


def test_fused_qkv_is_split_like_manually_split_weights():
    gpt2 = tiny_gpt2()
    d = gpt2.config.n_embd
    result = SpectralRegularizer(gpt2, exact=True)()
    expected = 0.0
    for index, block in enumerate(gpt2.transformer.h):
        weight, bias = block.attn.c_attn.weight.detach(), block.attn.c_attn.bias.detach()  # Conv1D: [d, 3d]
        for part, name in enumerate("qkv"):
            manual = weight[:, part * d : (part + 1) * d].t()
            sigma = torch.linalg.matrix_norm(manual, 2)
            assert float(result.sigmas[f"transformer.h.{index}.attn.c_attn[{name}]"]) == pytest.approx(float(sigma), rel=1e-12)
            expected += float((sigma**2 - 1) ** 2) + float(bias[part * d : (part + 1) * d].square().sum() ** 2)
        for conv in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            sigma = torch.linalg.matrix_norm(conv.weight.detach(), 2)
            expected += float((sigma**2 - 1) ** 2) + float(conv.bias.detach().square().sum() ** 2)
    assert len(result.sigmas) == 2 * 6
    assert result.penalty.item() == pytest.approx(expected, rel=1e-10)

    akorn = AKOrNForSudoku(AKOrNConfig(hidden_size=8, num_heads=2, oscillator_dim=4, loops=2))
    sigmas = SpectralRegularizer(akorn, exact=True)().sigmas
    assert sorted(sigmas) == ["coupling.output", "coupling.qkv[k]", "coupling.qkv[q]", "coupling.qkv[v]"]
    qkv = akorn.coupling.qkv.weight.detach()  # nn.Linear: [3d, d]
    for part, name in enumerate("qkv"):
        assert float(sigmas[f"coupling.qkv[{name}]"]) == pytest.approx(
            float(torch.linalg.matrix_norm(qkv[part * 8 : (part + 1) * 8], 2)), rel=1e-6)


def test_target_selection_and_errors():
    model = itrsa(mlp_ratio=2)
    names = [t.name for t in spectral_targets(model)]
    assert names == ["attention.query", "attention.key", "attention.value", "attention.output", "mlp.0", "mlp.2"]
    assert [t.name for t in spectral_targets(model, ["attention.q*"])] == ["attention.query"]
    assert [t.name for t in spectral_targets(model, [model.mlp])] == ["mlp.0", "mlp.2"]
    with pytest.raises(ArgumentError, match="matches no nn.Linear"):
        spectral_targets(model, ["nothing.here"])
    odd = torch.nn.ModuleDict({"qkv": torch.nn.Linear(4, 10)})
    with pytest.raises(ArgumentError, match="Cannot split the fused projection"):
        spectral_targets(odd, ["qkv"])


# ---------------------------------------------------------------------------------------------- Jacobian penalty
def test_jacobian_penalty_gradient_matches_finite_differences():
    model = itrsa(hidden_size=8, attention_bias=False)
    ids = torch.stack([row["input_ids"] for row in sudoku_rows(2)])
    looped = model.loop_map(ids)
    x = looped.trajectory(looped.x0, steps=1)[-1]

    def reference_penalty():  # an independent sigma: Lanczos to 1e-13
        sigma = jacobiscope.spectral_norm(looped, x, tol=1e-13, max_iter=400).value
        return float(((sigma - 1.0) ** 2).mean())

    start = jacobiscope.spectral_norm(looped, x, tol=1e-13, max_iter=400)
    result = jacobian_spectral_penalty(looped, x, target=1.0, iterations=3, v0=start.right_vector)
    torch.testing.assert_close(result.sigma, start.value, rtol=1e-9, atol=0)
    result.penalty.backward()
    weight = model.attention.query.weight
    analytic = float(weight.grad[0, 1])
    h = 1e-6
    with torch.no_grad():
        weight[0, 1] += h
        plus = reference_penalty()
        weight[0, 1] -= 2 * h
        minus = reference_penalty()
        weight[0, 1] += h
    assert analytic == pytest.approx((plus - minus) / (2 * h), rel=1e-6)
    assert abs(analytic) > 1e-4

    # the same gradient through torch.func on LoopedMap.with_params
    params = {k: v.detach() for k, v in looped.params.items() if v.requires_grad}
    grads = torch.func.grad(lambda p: jacobian_spectral_penalty(looped, x, params=p, iterations=3,
                                                                v0=start.right_vector).penalty)(params)
    assert float(grads["model.attention.query.weight"][0, 1]) == pytest.approx(analytic, rel=1e-9)

    # one-sided: no penalty (and no gradient) below the target
    low = jacobian_spectral_penalty(looped, x, target=10.0, one_sided=True, iterations=3, v0=start.right_vector)
    assert low.penalty.item() == 0.0


def test_jacobian_regularizer_on_hf_block_reaches_the_weights():
    model = tiny_gpt2()
    model.train()
    inputs = {"input_ids": torch.randint(1, 50, (3, 6), generator=torch.Generator().manual_seed(0)),
              "attention_mask": torch.ones(3, 6, dtype=torch.long)}
    result = JacobianRegularizer(samples=2, iterations=2, layers=[1])(model, inputs, step=0)
    assert result.sigma.shape == (2,) and torch.isfinite(result.sigma).all()
    assert result.meta["layer"] == 1
    assert model.training  # the adapters' eval switch is undone
    result.penalty.backward()
    assert model.transformer.h[1].attn.c_attn.weight.grad.abs().sum() > 0
    assert model.transformer.h[0].attn.c_attn.weight.grad is None


# ---------------------------------------------------------------------------------------------- energy
def test_energy_penalties_vanish_exactly_on_the_constraints():
    # E-single: one head with W_V W_O = sym(W_K W_Q^T) (row convention: A = weight.T)
    model = itrsa(num_heads=1)
    attention = model.attention
    with torch.no_grad():
        qk = attention.key.weight.t() @ attention.query.weight
        attention.output.weight.copy_(torch.eye(16, dtype=torch.float64))
        attention.value.weight.copy_(0.5 * (qk + qk.t()))
    assert energy_penalty(model, "e_single").item() < 1e-26
    with torch.no_grad():
        attention.value.weight[0, 1] += 0.1
    assert energy_penalty(model, "e_single").item() > 1e-3

    # E-multi: per head symmetric QK (keys tied to queries) and symmetric VO (W_O = W_V^T)
    model = itrsa(num_heads=2)
    attention = model.attention
    with torch.no_grad():
        attention.key.weight.copy_(attention.query.weight)
        attention.output.weight.copy_(attention.value.weight.t())
    assert energy_penalty(model, "e_multi").item() < 1e-26
    assert energy_penalty(model, "e_single").item() > 1e-3  # a different constraint
    with torch.no_grad():
        attention.key.weight[0, 0] += 0.1
    assert energy_penalty(model, "e_multi").item() > 1e-5

    # the energy-constrained parameterizations satisfy their own constraint
    assert energy_penalty(itrsa(num_heads=1, attention="e_single", attention_bias=False), "e_single").item() == 0.0
    assert energy_penalty(itrsa(attention="e_multi", attention_bias=False), "e_multi").item() < 1e-26
    assert energy_penalty(itrsa(), "e_multi").item() > 0
    # Hugging Face blocks through the adapter spec
    assert energy_penalty(tiny_gpt2(), "e_multi").item() > 0
    with pytest.raises(ArgumentError):
        energy_penalty(itrsa(), "e_both")


# ---------------------------------------------------------------------------------------------- trainer
REGULARIZED = dict(spec_reg_weight=0.5, jacobian_reg_weight=0.2, jacobian_reg_samples=2, jacobian_reg_iterations=2,
                   energy_reg="e_multi", energy_reg_weight=0.1)


def test_gradient_accumulation_gives_the_full_batch_update(tmp_path):
    data = sudoku_rows(32)
    base = itrsa()
    runs = {}
    for label, trainer_class, options in [
        ("reg_32", SpectralRegTrainer, dict(per_device_train_batch_size=32)),
        ("reg_8x4", SpectralRegTrainer, dict(per_device_train_batch_size=8, gradient_accumulation_steps=4)),
        ("plain_32", transformers.Trainer, dict(per_device_train_batch_size=32)),
        ("plain_8x4", transformers.Trainer, dict(per_device_train_batch_size=8, gradient_accumulation_steps=4)),
    ]:
        model = copy.deepcopy(base)
        trainer = make_trainer(model, data, tmp_path / label, trainer_class, **REGULARIZED, **options)
        trainer.train()
        runs[label] = (model, trainer)
    reg_32, reg_8x4 = runs["reg_32"][0], runs["reg_8x4"][0]
    assert_same_parameters(reg_32, reg_8x4)
    # the penalties are in the update (it differs from the unregularized one) ...
    assert max_difference(reg_32, runs["plain_32"][0]) > 1e-4
    logs = runs["reg_8x4"][1].state.log_history[0]
    assert {"spec_penalty", "spec_sigma_max", "jacobian_penalty", "jacobian_sigma", "energy_penalty"} <= set(logs)
    assert all(math.isfinite(logs[k]) for k in ("spec_penalty", "jacobian_penalty", "energy_penalty"))
    # ... and the plain Trainer is right too: the Sudoku models declare accepts_loss_kwargs = False (their forward
    # takes **kwargs but returns a plain mean), so Trainer applies its own gradient-accumulation scaling
    assert_same_parameters(runs["plain_32"][0], runs["plain_8x4"][0])


def test_gradient_accumulation_with_a_model_that_normalizes_by_num_items(tmp_path):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (8, 6), generator=generator)
    data = [{"input_ids": row, "labels": row} for row in ids]
    base = tiny_gpt2()
    models = []
    for label, options in [("full", dict(per_device_train_batch_size=8)),
                           ("accumulated", dict(per_device_train_batch_size=4, gradient_accumulation_steps=2))]:
        model = copy.deepcopy(base)
        trainer = make_trainer(model, data, tmp_path / label, spec_reg_weight=0.5, jacobian_reg_weight=0.2,
                               jacobian_reg_samples=2, jacobian_reg_iterations=2, **options)
        assert trainer.model_accepts_loss_kwargs  # GPT-2 divides by num_items_in_batch itself
        trainer.train()
        models.append(model)
    assert_same_parameters(*models)
    assert max_difference(models[0], base) > 0


def test_resume_restores_the_power_iteration_vectors(tmp_path):
    data = sudoku_rows(8)
    options = dict(spec_reg_weight=0.1, per_device_train_batch_size=4, max_steps=2, save_strategy="steps", save_steps=2)
    first = make_trainer(itrsa(torch.float32), data, tmp_path, **options)
    first.train()
    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / SPECTRAL_STATE_NAME).is_file()
    saved = first.spectral_regularizer.state_dict()

    second = make_trainer(itrsa(torch.float32, initializer_range=0.1), data, tmp_path, **options)
    initial = SpectralRegularizer(second.model, init_iterations=10, seed=0)
    initial()
    second.train(resume_from_checkpoint=str(checkpoint))
    restored = second.spectral_regularizer.state_dict()
    assert sorted(restored) == sorted(saved)
    for key in saved:
        torch.testing.assert_close(restored[key], saved[key], rtol=0, atol=0)
    # not merely the fresh vectors of the same model
    fresh = initial.state_dict()
    assert max(float((restored[k] - fresh[k]).abs().max()) for k in saved) > 1e-3


def test_warmup_ramp_and_option_checks(tmp_path):
    trainer = make_trainer(itrsa(), sudoku_rows(4), tmp_path, spec_reg_weight=0.1, spec_reg_warmup_steps=4,
                           per_device_train_batch_size=4, max_steps=2)
    assert [trainer.regularizer_weight_factor(step) for step in (0, 2, 4, 9)] == [0.0, 0.5, 1.0, 1.0]
    trainer.train()
    # step 0 has factor 0 (no penalty computed); step 1 logs the ramp
    assert trainer.state.log_history[1]["reg_weight_factor"] == 0.25
    with pytest.raises(ArgumentError, match=r"energy_reg must be None, 'e_single' or 'e_multi', got 'e_double' — "):
        SpectralRegTrainingArguments(output_dir=str(tmp_path), energy_reg="e_double", report_to=[])
    with pytest.raises(ArgumentError, match=r"got 'emulti' \(did you mean 'e_multi'\?\) — pass one of them"):
        SpectralRegTrainingArguments(output_dir=str(tmp_path), energy_reg="emulti", report_to=[])
    with pytest.raises(ArgumentError, match=r"jacobian_reg_mode .* got 'atention' \(did you mean 'attention'\?\)"):
        SpectralRegTrainingArguments(output_dir=str(tmp_path), jacobian_reg_mode="atention", report_to=[])
    with pytest.raises(ArgumentError, match="spec_reg_weight"):
        SpectralRegTrainingArguments(output_dir=str(tmp_path), spec_reg_weight=-1.0, report_to=[])


def test_mixed_precision_and_half_precision_weights(tmp_path):
    data = sudoku_rows(8)
    for label, dtype, options in [("autocast", torch.float32, dict(bf16=True)), ("bf16_weights", torch.bfloat16, {})]:
        model = itrsa(dtype)
        trainer = make_trainer(model, data, tmp_path / label, per_device_train_batch_size=4, max_steps=2,
                               **REGULARIZED, **options)
        trainer.train()
        logs = trainer.state.log_history[1]
        assert all(math.isfinite(logs[k]) for k in ("spec_penalty", "jacobian_penalty", "energy_penalty")), logs
        # the power iteration runs in float32 whatever the weights
        assert {v.dtype for v in trainer.spectral_regularizer.state_dict().values()} == {torch.float32}
        assert model.attention.query.weight.dtype == dtype


# ---------------------------------------------------------------------------------------------- callbacks
def test_lyapunov_and_energy_callbacks_log_finite_metrics_during_evaluation(tmp_path):
    data = sudoku_rows(8)
    probe = torch.stack([row["input_ids"] for row in data[:2]])
    lyapunov = LyapunovCallback(probe, steps=6, transient=2)
    energy = PseudoEnergyCallback(probe)
    model = itrsa(torch.float32)
    trainer = make_trainer(model, data, tmp_path, spec_reg_weight=0.1, per_device_train_batch_size=4)
    for callback in (lyapunov, energy):
        trainer.add_callback(callback)
        callback.bind(trainer)
    metrics = trainer.evaluate(data[:4])
    for key in ("eval_lyapunov_max", "eval_lyapunov_max_worst", "eval_jacobian_norm", "eval_jacobian_norm_max",
                "eval_pseudo_energy_first", "eval_pseudo_energy_last", "eval_pseudo_energy_monotone_fraction"):
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["eval_jacobian_norm"] > 0
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert {"eval_lyapunov_max", "eval_jacobian_norm", "eval_pseudo_energy_last"} <= logged
    assert len(energy.trajectories[-1]) == model.config.loops

    # a plain Trainer, unbound callback, HF model through map_fn
    gpt2 = tiny_gpt2(torch.float32)
    ids = torch.randint(1, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    callback = LyapunovCallback(map_fn=lambda m: jacobiscope.looped_block(m, ids, layer=0, mode="attention"),
                                steps=4, transient=1)
    rows = [{"input_ids": r, "labels": r} for r in ids]
    plain = make_trainer(gpt2, rows, tmp_path / "gpt2", transformers.Trainer)
    plain.add_callback(callback)
    metrics = plain.evaluate(rows)
    assert math.isfinite(metrics["eval_lyapunov_max"]) and math.isfinite(metrics["eval_jacobian_norm"])
    assert any("eval_lyapunov_max" in entry for entry in plain.state.log_history)
    with pytest.raises(ArgumentError, match="probe"):
        LyapunovCallback()
    no_drive = PseudoEnergyCallback(map_fn=lambda m: jacobiscope.looped_block(m, ids, layer=0, mode="block"))
    with pytest.raises(TypeError, match="no drive"):
        no_drive.measure(gpt2)


# ---------------------------------------------------------------------------------------------- several processes
@pytest.mark.slow  # two processes under accelerate: ~22 s on 2 cores; the sharding itself is tested by analyze's
def test_two_processes_under_accelerate_log_the_penalty_and_finish(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, torch
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from accelerate import PartialState
        from test_training import itrsa, make_trainer, sudoku_rows

        state = PartialState()
        trainer = make_trainer(itrsa(torch.float32), sudoku_rows(16), {str(tmp_path / 'out')!r}, max_steps=2,
                               per_device_train_batch_size=2, gradient_accumulation_steps=2, spec_reg_weight=0.1,
                               jacobian_reg_weight=0.1, jacobian_reg_samples=1, jacobian_reg_iterations=1,
                               ddp_find_unused_parameters=False)
        trainer.train()
        vectors = {{k: v.tolist() for k, v in trainer.spectral_regularizer.state_dict().items()}}
        parameters = [p.detach().sum().item() for p in trainer.model.parameters()]
        with open({str(tmp_path)!r} + f"/rank{{state.process_index}}.json", "w") as f:
            json.dump({{"log": trainer.state.log_history, "step": trainer.state.global_step, "vectors": vectors,
                       "parameters": parameters, "processes": state.num_processes}}, f)
    """))
    from conftest import launch_two_processes

    result = launch_two_processes(script)
    assert result.returncode == 0, result.stderr[:4000] + "\n...\n" + result.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2)]
    assert [r["processes"] for r in ranks] == [2, 2] and all(r["step"] == 2 for r in ranks)
    logs = [entry for entry in ranks[0]["log"] if "loss" in entry]
    assert len(logs) == 2 and all(math.isfinite(e["spec_penalty"]) and math.isfinite(e["jacobian_penalty"]) for e in logs)
    # every process holds the same power-iteration state and the same weights
    assert ranks[0]["vectors"] == ranks[1]["vectors"]
    assert ranks[0]["parameters"] == pytest.approx(ranks[1]["parameters"], rel=1e-6)


def test_a_model_declares_its_looped_modules_and_attention():
    """Regularizers read a model's declarations (like transformers' _no_split_modules), never its class name."""
    from torch import nn

    from jacobiscope.training import attention_weights, spectral_penalty

    class MyLoop(nn.Module):
        _looped_modules = ["core"]
        _looped_attention = ["core.mix"]

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Linear(4, 8)  # not looped: outside the penalty
            self.core = nn.Module()
            self.core.mix = nn.Module()
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(self.core.mix, name, nn.Linear(8, 8, bias=False))
            self.core.mix.num_heads = 2

    model = MyLoop()
    mix = model.core.mix
    expected = sum((torch.linalg.matrix_norm(m.weight, 2) ** 2 - 1) ** 2
                   for m in (mix.q_proj, mix.k_proj, mix.v_proj, mix.o_proj))
    assert torch.allclose(spectral_penalty(model), expected, rtol=1e-4)
    [weights] = attention_weights(model)
    assert weights.name == "core.mix" and weights.heads == 2
    value, output = mix.v_proj.weight.T, mix.o_proj.weight.T
    head_1 = value[:, 4:] @ output[4:, :]
    assert torch.allclose(weights.value_output[1], head_1, atol=1e-6)
    assert torch.allclose(weights.query, mix.q_proj.weight.T)
