"""Tiny Hugging Face models built from configs in code (no downloads), one per supported family."""
import torch
import transformers as T


def tiny_configs():
    common = dict(vocab_size=60)
    return {
        "gpt2": T.GPT2Config(n_embd=16, n_layer=3, n_head=2, bos_token_id=0, eos_token_id=0, **common),
        "bert": T.BertConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, **common),
        "llama": T.LlamaConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=32, bos_token_id=0, eos_token_id=0, pad_token_id=0, **common),
        "qwen2": T.Qwen2Config(hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=32, bos_token_id=0, eos_token_id=0, **common),
        "vit": T.ViTConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
                           image_size=8, patch_size=4),
        "mistral": T.MistralConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=32, bos_token_id=0, eos_token_id=0, pad_token_id=0, **common),
        "distilbert": T.DistilBertConfig(dim=16, n_layers=3, n_heads=2, hidden_dim=32, **common),
        "opt": T.OPTConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=2, ffn_dim=32,
                           word_embed_proj_dim=16, bos_token_id=0, eos_token_id=0, pad_token_id=1, **common),
        "gemma": T.GemmaConfig(hidden_size=16, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=32, head_dim=4, bos_token_id=0, eos_token_id=0, pad_token_id=0, **common),
    }


def tiny_model(family, dtype=torch.float32, **overrides):
    config = tiny_configs()[family]
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    return T.AutoModel.from_config(config).to(dtype).eval()


def tiny_inputs(family, batch=1, length=6):
    generator = torch.Generator().manual_seed(1)
    if family == "vit":
        return torch.randn(batch, 3, 8, 8, generator=generator)
    return torch.randint(2, 60, (batch, length), generator=generator)


class _Stop(Exception):
    pass


def model_block_function(model, model_kwargs, block):
    """h -> output of ``block`` when the model itself runs with ``h`` substituted for the block's input.

    An independent reference for replayed maps: the model computes its own masks and position tables.
    """

    def function(h):
        result = {}

        def pre(module, args, kwargs):
            if args:
                return (h,) + tuple(args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        def post(module, args, kwargs, output):
            result["y"] = output[0] if isinstance(output, tuple) else output
            raise _Stop

        handles = [block.register_forward_pre_hook(pre, with_kwargs=True),
                   block.register_forward_hook(post, with_kwargs=True)]
        try:
            model(**model_kwargs, use_cache=False) if "vit" not in type(model).__name__.lower() else model(**model_kwargs)
        except _Stop:
            pass
        finally:
            for handle in handles:
                handle.remove()
        return result["y"]

    return function
