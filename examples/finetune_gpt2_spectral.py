"""Fine-tune a small GPT-2 (built from a config, no download) with its blocks spectrally regularized.

    python examples/finetune_gpt2_spectral.py                          # byte-level LM on jacobiscope's README, ~1 min
    python examples/finetune_gpt2_spectral.py --text_file my.txt --n_layer 4 --max_steps 500
    python examples/finetune_gpt2_spectral.py --jacobian_reg_mode attention --jacobian_reg_layers 1
    python examples/finetune_gpt2_spectral.py --help                   # every Trainer / regularizer flag

What is regularized, through the adapters (`jacobiscope.adapters.find_blocks`): every linear map of the GPT-2 blocks,
with the fused ``c_attn`` Conv1D split into W_Q, W_K, W_V (``spec_reg_weight``), and the Jacobian of one block
(drawn per step) at the hidden states of the batch (``jacobian_reg_weight``, target ``jacobian_reg_target``). At
each evaluation the `LyapunovCallback` loops block ``--probe_layer`` in the ItrSA form ``X <- LN(X + Attn(X))`` on
a fixed probe and logs its largest Lyapunov exponent and Jacobian norm. The same recipe applies to any model the
adapters know (Llama, Qwen2, BERT, ...): load it with ``from_pretrained`` instead of building it from a config.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import HfArgumentParser

import jacobiscope
from jacobiscope.training import LyapunovCallback, SpectralRegTrainer, SpectralRegTrainingArguments


@dataclass
class ModelArguments:
    n_embd: int = field(default=64, metadata={"help": "Hidden size of the GPT-2 built from a config."})
    n_layer: int = field(default=2, metadata={"help": "Blocks."})
    n_head: int = field(default=4, metadata={"help": "Attention heads."})
    context: int = field(default=64, metadata={"help": "Tokens (bytes) per training sequence."})
    text_file: str | None = field(default=None, metadata={"help": "Training text (default: jacobiscope's README)."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of the sequences held out."})
    probe_layer: int = field(default=0, metadata={"help": "Block whose looped attention the LyapunovCallback follows."})
    lyapunov_steps: int = field(default=16, metadata={"help": "Loops the Lyapunov exponent is averaged over."})


@dataclass
class ExampleTrainingArguments(SpectralRegTrainingArguments):
    """Small defaults for a CPU; every TrainingArguments / regularizer flag can be overridden."""

    output_dir: str = field(default="runs/gpt2_spectral", metadata={"help": "Where checkpoints go."})
    max_steps: int = field(default=150, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Batch size."})
    gradient_accumulation_steps: int = field(default=2, metadata={"help": "Micro-batches per optimizer step."})
    learning_rate: float = field(default=1e-3, metadata={"help": "AdamW learning rate."})
    warmup_steps: int = field(default=10, metadata={"help": "Learning-rate warm-up steps."})
    logging_steps: int = field(default=10, metadata={"help": "Log every n steps."})
    eval_strategy: str = field(default="steps", metadata={"help": "When to evaluate."})
    eval_steps: int = field(default=50, metadata={"help": "Evaluate every n steps."})
    save_strategy: str = field(default="no", metadata={"help": "When to save checkpoints."})
    report_to: str = field(default="none", metadata={"help": "Reporting integrations."})
    use_cpu: bool = field(default=not torch.cuda.is_available(), metadata={"help": "Train on the CPU."})
    spec_reg_weight: float = field(default=1e-3, metadata={"help": "Weight of the spectral penalty."})
    spec_reg_warmup_steps: int = field(default=20, metadata={"help": "Ramp of the regularizer weights."})
    jacobian_reg_weight: float = field(default=1e-2, metadata={"help": "Weight of the Jacobian penalty."})
    jacobian_reg_samples: int = field(default=2, metadata={"help": "Sequences whose block Jacobian is penalized."})


def byte_sequences(text: bytes, context: int) -> torch.Tensor:
    """Non-overlapping byte windows ``[N, context]`` (token id = byte value, vocabulary 256)."""
    data = torch.tensor(list(text), dtype=torch.long)
    count = len(data) // context
    if count < 4:
        raise SystemExit(f"The text has {len(data)} bytes: need at least {4 * context} for --context {context}.")
    return data[: count * context].reshape(count, context)


def main() -> None:
    parser = HfArgumentParser((ModelArguments, ExampleTrainingArguments))
    model_args, args = parser.parse_args_into_dataclasses()
    torch.manual_seed(args.seed)
    path = Path(model_args.text_file) if model_args.text_file else Path(__file__).resolve().parents[1] / "README.md"
    sequences = byte_sequences(path.read_bytes(), model_args.context)
    sequences = sequences[torch.randperm(len(sequences), generator=torch.Generator().manual_seed(args.seed))]
    held_out = max(1, int(len(sequences) * model_args.eval_fraction))
    rows = [{"input_ids": s, "labels": s} for s in sequences]
    train, test = rows[held_out:], rows[:held_out]
    print(f"[data] {path.name}: {len(train)} training and {len(test)} held-out sequences of {model_args.context} bytes")

    config = transformers.GPT2Config(vocab_size=256, n_positions=model_args.context, n_embd=model_args.n_embd,
                                     n_layer=model_args.n_layer, n_head=model_args.n_head, bos_token_id=0,
                                     eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    probe = sequences[:4, :32]

    def probe_map(m):
        # the block's attention in the ItrSA form, on the probe's hidden states entering the layer
        return jacobiscope.looped_block(m, probe, layer=model_args.probe_layer, mode="attention")

    callback = LyapunovCallback(map_fn=probe_map, steps=model_args.lyapunov_steps, transient=4)
    trainer = SpectralRegTrainer(model=model, args=args, train_dataset=train, eval_dataset=test, callbacks=[callback])
    targets = [t.name for t in trainer.spectral_regularizer.targets] if trainer.spectral_regularizer else []
    print(f"[reg] spectral penalty on {len(targets)} matrices, e.g. {targets[:4]}")
    trainer.train()
    metrics = trainer.evaluate()
    print(json.dumps({k: v for k, v in metrics.items() if k.startswith("eval_")}, indent=1))
    logged = [entry for entry in trainer.state.log_history if "spec_penalty" in entry]
    if not logged:  # --logging_steps larger than the run: nothing was logged, which is said rather than raised
        print(f"[reg] no penalty was logged: --logging_steps {args.logging_steps} exceeds the {trainer.state.global_step}"
              " steps run — pass a smaller --logging_steps")
        return
    last = logged[-1]
    print(json.dumps({k: last[k] for k in ("step", "spec_penalty", "spec_sigma_max", "jacobian_sigma") if k in last}))


if __name__ == "__main__":
    main()
