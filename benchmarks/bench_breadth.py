"""Breadth sweep: jacobiscope's adapters over every model type in transformers' config registry (issue 15).

For each ``model_type`` in ``transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES`` the sweep

1. builds a tiny model: the config class with its common size attributes shrunk (hidden 32, 2 layers, 4 heads,
   small vocab / intermediate / vision / audio sizes, sub-configs such as ``text_config`` / ``vision_config``
   shrunk the same way, see `shrink_config`), ``AutoModel.from_config`` with eager attention where accepted
   (sub-model configs AutoModel does not map: the class named after the config, ``FooTextConfig`` ->
   ``FooTextModel``), float32, eval mode. Nothing is downloaded;
2. finds inputs its forward accepts (token ids, pixel values, audio values / features after the model's
   ``main_input_name``; decoder ids for encoder-decoders; pixel values next to the ids for dual encoders);
3. runs the jacobiscope checks:

   - **block**: for layer 0 and the last layer, ``looped_block(model, inputs, layer=l, mode="block")`` applied
     once to its ``x0`` equals the model's own ``hidden_states[l + 1]`` (``output_hidden_states=True``) to 1e-4
     relative (max abs difference / max abs value). The tuple of hidden states is the one of the output
     (``hidden_states``, ``encoder_hidden_states``, ``decoder_hidden_states``, ``text_model_output.hidden_states``
     ...) whose entry ``l`` is the map's ``x0``; for outputs that record block outputs only (Mamba, RWKV: no
     embedding entry) step(x0) is entry ``l``. ``block_ok`` is layer 0 (the last layer's output is normalized by
     some families; it is recorded apart, ``block_last_ok``);
   - **check_adapter**: ``jacobiscope.check_adapter(model, inputs, layers=[0], raise_on_failure=False)`` (x0 and the
     step against the block's own input/output and the hidden states, determinism, jvp vs finite differences, the
     adjoint test, and the attention mode); recorded, not part of the four counts;
   - **attention**: ``looped_block(..., mode="attention")`` for layer 0 builds and one step is finite, with the
     spec's parts or, without a spec, the parts traced from the block's own call (``attention_via``); ``n/a`` where
     the trace shows no attention of the ItrSA form (block mode only);
   - **analyze**: ``jacobiscope.analyze(model, inputs, layers=[0], loops=4, diagnostics=["lyapunov"],
     progress=False)`` returns a finite ``lambda_max``.

Each model type gets ``--limit`` seconds (``signal.alarm``) to build and again to run its checks. Results are
written to ``benchmarks/out/breadth.json`` after every model type (``--resume`` continues a partial file; a type
that crashed the interpreter is recorded as ``crash``), and a summary (counts, failures by category) is printed.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_breadth.py    # all 822 (~13 min, 2 cores)
    .venv/bin/python benchmarks/bench_breadth.py --only gpt2 bert t5 llava        # a few types
    .venv/bin/python benchmarks/bench_breadth.py --resume                         # continue a partial run
    .venv/bin/python benchmarks/bench_breadth.py --summary                        # print the summary of the file
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import inspect
import io
import json
import math
import os
import platform
import re
import resource
import signal
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "breadth.json"

# ----------------------------------------------------------------------------------------------- shrinking

HIDDEN = 32
HEADS = 4
KV_HEADS = 2
LAYERS = 2
FFN = 64
MOE_FFN = 32
VOCAB = 256
POSITIONS = 128
IMAGE = 32
SEQ = 8

_HIDDEN_KEYS = ("hidden_size", "d_model", "d_latents", "n_embd", "dim", "embed_dim", "word_embed_proj_dim", "projection_dim",
                "text_embed_dim", "vision_embed_dim", "embedding_size", "emb_dim", "model_dim", "d_embed", "n_embed")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
               "num_encoder_layers", "num_decoder_layers", "decoder_num_layers", "depth", "num_blocks",
               "encoder_num_layers", "text_num_layers", "vision_num_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
              "decoder_attention_heads", "decoder_num_attention_heads", "encoder_num_attention_heads",
              "num_attention_heads_text", "attention_heads")
_KV_KEYS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv")
_HEAD_DIM_KEYS = ("head_dim", "d_kv", "attention_head_dim", "kv_channels", "attention_head_size", "d_head")
_FFN_KEYS = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner", "hidden_dim",
             "ffn_hidden_size", "mlp_dim", "decoder_intermediate_size", "encoder_intermediate_size", "inner_dim",
             "d_inner", "mlp_hidden_size", "dense_intermediate_size")
_MOE_FFN_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                 "moe_ffn_hidden_size", "moe_dim")
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
_TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "num_selected_experts", "moe_k", "top_k_experts")
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_sequence_length",
                  "max_target_positions", "max_text_len")
_SMALL_RANKS = {"kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                "v_head_dim": 8, "n_shared_experts": 1, "num_shared_experts": 1, "n_group": 1, "topk_group": 1,
                "first_k_dense_replace": 1, "index_n_heads": 2, "index_head_dim": 8, "index_topk": 4,
                "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
                "linear_value_head_dim": 8, "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_head_dim": 8,
                "mamba_d_state": 8, "state_size": 8, "ssm_state_size": 8, "d_state": 8, "time_step_rank": 4,
                "mamba_expand": 2, "n_groups": 1, "mamba_n_groups": 1, "conv_kernel": 4,
                "num_mel_bins": 16, "feature_size": 16, "input_feat_per_channel": 16, "max_source_positions": 16,
                "image_size": IMAGE, "vision_image_size": IMAGE, "num_query_tokens": 4, "sliding_window": 64,
                "num_codebooks": 2, "codebook_size": 64, "codebook_dim": 8, "num_queries": 4,
                "hidden_size_per_head": 8, "window_size": 4}


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_config(value) -> bool:
    from transformers import PretrainedConfig

    return isinstance(value, PretrainedConfig)


class _Safe:
    """Attribute access that never raises (some configs raise non-AttributeErrors for per-layer attributes) and
    hides read-only properties (they cannot be set)."""

    def __init__(self, config):
        self._config = config

    def __getattr__(self, key):
        if isinstance(getattr(type(self._config), key, None), property):
            return None
        try:
            return getattr(self._config, key)
        except Exception:  # noqa: BLE001
            return None


def _size_overrides(config) -> dict:
    """The common size attributes this config has, shrunk (scalars only; lists of stage widths/depths too)."""
    values = {}
    raw, config = config, _Safe(config)
    has = lambda key: getattr(config, key) is not None  # noqa: E731
    for key in _HIDDEN_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > HIDDEN:
            values[key] = HIDDEN
    for key in _LAYER_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > LAYERS:
            values[key] = LAYERS
    for key in _HEAD_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > HEADS:
            values[key] = HEADS
    heads = next((getattr(config, k) for k in _HEAD_KEYS if _int(getattr(config, k, None))), None)
    for key in _KV_KEYS:
        value = getattr(config, key, None)
        if _int(value) and heads is not None and value == heads and value > HEADS:
            values[key] = HEADS  # multi-head (or MLA) attention: as many key/value heads as heads
        elif _int(value) and value > KV_HEADS:
            values[key] = KV_HEADS
    for key in _HEAD_DIM_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > HIDDEN // HEADS:
            values[key] = HIDDEN // HEADS
    for key in _FFN_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > FFN:
            values[key] = FFN
    for key in _MOE_FFN_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > MOE_FFN:
            values[key] = MOE_FFN
    for key in _EXPERT_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > 4:
            values[key] = 4
    for key in _TOPK_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > 2:
            values[key] = 2
    for key in _POSITION_KEYS:
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > POSITIONS:
            values[key] = POSITIONS
    for key, small in _SMALL_RANKS.items():
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > small:
            values[key] = small
    if has("patch_size") and _int(config.patch_size) and config.patch_size > 8:
        values["patch_size"] = 8
    for key in ("image_size", "patch_size"):
        value = getattr(config, key)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(_int(v) for v in value):
            values[key] = [min(v, IMAGE if key == "image_size" else 8) for v in value]
    for key in ("num_frames",):
        if has(key) and _int(getattr(config, key)) and getattr(config, key) > 4:
            values[key] = 4
    # Lists of per-stage sizes (hierarchical vision backbones, audio conv stacks).
    for key in ("hidden_sizes", "embed_dims", "dims", "channels", "widths", "stage_dims"):
        value = getattr(config, key, None)
        if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
            values[key] = [min(v, HIDDEN * 2 ** min(i, 1)) for i, v in enumerate(value)]
    for key in ("depths", "stage_depths", "num_layers_per_stage", "encoder_layers_per_stage"):
        value = getattr(config, key, None)
        if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
            values[key] = [min(v, 1) for v in value]
    for key in ("conv_dim",):
        value = getattr(config, key, None)
        if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
            values[key] = [min(v, HIDDEN) for v in value]
    value = getattr(config, "num_heads", None)
    if isinstance(value, (list, tuple)) and value and all(_int(v) for v in value):
        values["num_heads"] = [min(v, 2) for v in value]
    # The vocabulary: small, but above every special token id the config names (padding_idx must exist).
    special = [v for k, v in vars(raw).items() if _int(v) and (k.endswith("_token_id") or k.endswith("_token_index")
                                                                      or k.endswith("_id") and "token" in k)]
    for key in ("vocab_size", "text_vocab_size", "vision_vocab_size"):
        value = getattr(config, key, None)
        if _int(value) and value > VOCAB:
            values[key] = max(VOCAB, max(special, default=0) + 1) if max(special, default=0) + 1 <= 262_144 else value
    return values


def _rope_fix(config_dict: dict, head_dim: int) -> None:
    """Scale an M-RoPE ``mrope_section`` (it must sum to head_dim / 2) to the shrunk head size."""
    for key in ("rope_parameters", "rope_scaling"):
        rope = config_dict.get(key)
        if isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list):
            sections = rope["mrope_section"]
            total, half = sum(sections), head_dim // 2
            if total != half and total > 0:
                scaled = [max(1, s * half // total) for s in sections]
                scaled[0] += half - sum(scaled)
                rope = dict(rope, mrope_section=scaled)
                config_dict[key] = rope


def _mrope_post_fix(config) -> None:
    """Models whose modeling code defaults ``mrope_section`` (Qwen2-VL: [16, 24, 24], for head_dim 128) get one
    that sums to the shrunk head_dim / 2, set after construction (rope validation ignores it)."""
    module = sys.modules.get(type(config).__module__)
    path = getattr(module, "__file__", None)
    if not path:
        return
    modeling = Path(path).with_name(Path(path).name.replace("configuration_", "modeling_"))
    try:
        uses = "mrope_section" in modeling.read_text()
    except OSError:
        return
    rope = getattr(config, "rope_parameters", None)
    if not uses or not isinstance(rope, dict):
        return
    head_dim = getattr(config, "head_dim", None)
    if not _int(head_dim):
        hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
        head_dim = hidden // heads if _int(hidden) and _int(heads) and heads else None
    if head_dim is None:
        return
    half = head_dim // 2
    sections = rope.get("mrope_section")
    if not isinstance(sections, list) or sum(sections) != half:
        scaled = [half - 2 * (half // 4), half // 4, half // 4]
        rope["mrope_section"] = scaled


def _trim_per_layer_lists(config_dict: dict, old: dict, new: dict) -> None:
    """Lists with one entry per layer (``layer_types``, ...) follow the new layer count."""
    old_counts = {old[k] for k in _LAYER_KEYS if _int(old.get(k))}
    target = min((new[k] for k in _LAYER_KEYS if k in new), default=None)
    if target is None:
        return
    for key, value in list(config_dict.items()):
        if isinstance(value, list) and len(value) in old_counts and len(value) > target and not key.endswith("_config"):
            config_dict[key] = value[:target]


def shrink_config(config, depth: int = 0):
    """A shrunk copy of ``config``: common size attributes set small, sub-configs shrunk recursively.

    First tries the config's own values (``to_dict``) with the overrides (keeps what a composite config set on its
    sub-configs); if that does not construct, the class defaults with the overrides.
    """
    cls = type(config)
    overrides = _size_overrides(config)
    subs = {}
    for name in list(getattr(config, "sub_configs", {}) or {}) + [k for k, v in vars(config).items() if _is_config(v)]:
        value = getattr(config, name, None)
        if _is_config(value) and name not in subs and depth < 3:
            subs[name] = shrink_config(value, depth + 1)
    safe = _Safe(config)
    head_dim = overrides.get("head_dim", safe.head_dim)
    if not _int(head_dim):
        hidden = overrides.get("hidden_size", safe.hidden_size)
        heads = overrides.get("num_attention_heads", safe.num_attention_heads)
        head_dim = hidden // heads if _int(hidden) and _int(heads) and heads else HIDDEN // HEADS
    errors = []
    try:
        parameters = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        parameters = {}
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    data = config.to_dict()
    for skip in ("model_type", "transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype",
                 "_attn_implementation_autoset", "output_attentions", "output_hidden_states", "return_dict"):
        data.pop(skip, None)
    if not accepts_any:
        data = {k: v for k, v in data.items() if k in parameters}
    data = {k: v for k, v in data.items() if not isinstance(getattr(cls, k, None), property)}
    data.update(overrides)
    data.update(subs)
    _trim_per_layer_lists(data, vars(config), overrides)
    _rope_fix(data, head_dim)
    for attempt in ("own values", "defaults"):
        kwargs = data if attempt == "own values" else {**{k: v for k, v in overrides.items()}, **subs}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with contextlib.redirect_stdout(io.StringIO()):
                    shrunk = cls(**kwargs)
            _mrope_post_fix(shrunk)
            return shrunk
        except Exception as error:  # noqa: BLE001 - next attempt, reported if both fail
            errors.append(f"{attempt}: {type(error).__name__}: {first_line(error)}")
    # Last resort: set the overrides as attributes on a copy (per-layer lists trimmed the same way).
    try:
        import copy

        shrunk = copy.deepcopy(config)
        for key, value in {**overrides, **subs}.items():
            setattr(shrunk, key, value)
        for key, value in data.items():
            if isinstance(value, list) and isinstance(getattr(shrunk, key, None), list) and len(value) < len(getattr(shrunk, key)):
                setattr(shrunk, key, value)
        return shrunk
    except Exception as error:  # noqa: BLE001
        errors.append(f"setattr: {type(error).__name__}: {first_line(error)}")
        raise RuntimeError("could not shrink the config: " + " | ".join(errors)) from error


# ----------------------------------------------------------------------------------------------- helpers


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("time limit")


@contextlib.contextmanager
def time_limit(seconds: int):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else "").strip()[:240]


def reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"


def quiet():
    """Silence warnings and the stdout/stderr chatter of model construction."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    return stack


def count_parameters_on_meta(config) -> int | None:
    from transformers import AutoModel

    try:
        with quiet(), torch.device("meta"):
            model = AutoModel.from_config(config)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - the real build reports the error
        return None


def build_model(config):
    from transformers import AutoModel

    torch.manual_seed(0)
    note = "AutoModel, eager"
    with quiet():
        try:
            model = AutoModel.from_config(config, attn_implementation="eager")
        except Exception as eager_error:  # noqa: BLE001 - some families refuse eager; use their default
            fallback = _model_class_of(config) if "Unrecognized configuration class" in str(eager_error) else None
            if fallback is not None:
                # A sub-model config (``*_text_model``, ``*_vision_model``, ...) AutoModel does not map: the class
                # named after the config (FooTextConfig -> FooTextModel), from the same transformers module.
                torch.manual_seed(0)
                try:
                    model, note = fallback._from_config(config, attn_implementation="eager"), f"{fallback.__name__}, eager"
                except Exception:  # noqa: BLE001
                    model, note = fallback._from_config(config), f"{fallback.__name__}, default attention"
            else:
                try:
                    model = AutoModel.from_config(config)
                    note = f"AutoModel, default attention ({first_line(eager_error)[:80]})"
                except Exception:
                    raise eager_error from None
    return model.float().eval(), note


def _model_class_of(config):
    """``FooConfig`` -> ``FooModel`` from the config's modeling module (None if there is none)."""
    import importlib

    name = type(config).__name__
    if not name.endswith("Config"):
        return None
    module_name = type(config).__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001
        return None
    stem = name[: -len("Config")]
    for candidate in (stem + "Model", stem + "Transformer", stem):
        cls = getattr(module, candidate, None)
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and hasattr(cls, "_from_config"):
            return cls
    return None


# ----------------------------------------------------------------------------------------------- inputs


def _token_ids(config, length: int = SEQ) -> torch.Tensor:
    vocab = None
    for source in (config, getattr(config, "text_config", None)):
        if source is not None and _int(getattr(source, "vocab_size", None)):
            vocab = source.vocab_size
            break
    vocab = vocab or 100
    special = {v for c in (config, getattr(config, "text_config", None)) if c is not None
               for k, v in vars(c).items() if _int(v) and ("token" in k and (k.endswith("_id") or k.endswith("_index")))}
    pool = [i for i in range(3, min(vocab, 200)) if i not in special] or [1]
    return torch.tensor([[pool[(7 * i + 3) % len(pool)] for i in range(length)]])


def _image_size(config) -> int:
    for source in (config, getattr(config, "vision_config", None)):
        size = getattr(source, "image_size", None) if source is not None else None
        if isinstance(size, (list, tuple)) and size:
            return int(size[0])
        if _int(size):
            return size
    return IMAGE


def _vision_int(config, name: str, default: int) -> int:
    """An int attribute of the config, or of its vision sub-config, else ``default``."""
    for source in (config, getattr(config, "vision_config", None)):
        value = getattr(source, name, None) if source is not None else None
        if _int(value):
            return value
    return default


def _channels(config) -> int:
    return _vision_int(config, "num_channels", 3)


def candidate_inputs(model) -> list[dict]:
    """Keyword sets to try on ``model``'s forward, most plausible first."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    main = getattr(model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):
        main = main[0] if main else "input_ids"
    try:
        parameters = set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        parameters = set()
    ids = _token_ids(config)
    size, channels = _image_size(config), _channels(config)
    pixels = torch.randn(1, channels, size, size, generator=generator)
    mel = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or \
        getattr(config, "input_feat_per_channel", None) or 16
    frames = 2 * (getattr(config, "max_source_positions", None) or 16)
    frames_video = _video_frames(config)
    candidates = []
    if main == "input_ids":
        candidates.append({"input_ids": ids})
    elif main in ("pixel_values", "pixel_values_videos"):
        candidates.append({main: pixels})
        candidates.append({main: torch.randn(1, channels, 64, 64, generator=generator)})
        candidates.append({main: torch.randn(1, channels, 224, 224, generator=generator)})
        # videos: [B, frames, C, H, W]
        candidates.append({main: torch.randn(1, frames_video, channels, size, size, generator=generator)})
    elif main == "input_values":
        candidates.append({"input_values": torch.randn(1, 4000, generator=generator)})
        candidates.append({"input_values": torch.randn(1, 64, mel, generator=generator)})
        candidates.append({"input_values": torch.randn(1, 1, 4000, generator=generator)})  # mono audio codecs
        candidates.append({"input_values": torch.randn(1, 16000, generator=generator)})
    elif main == "input_features":
        candidates.append({"input_features": torch.randn(1, mel, frames, generator=generator)})
        candidates.append({"input_features": torch.randn(1, 64, mel, generator=generator)})
        candidates.append({"input_features": torch.randn(1, mel, 3000, generator=generator)})
    else:
        candidates.append({main: ids})
        candidates.append({main: pixels})
    extended = []
    for kwargs in candidates:
        extra = dict(kwargs)
        if "decoder_input_ids" in parameters and (getattr(config, "is_encoder_decoder", False) or main != "input_ids"):
            extra["decoder_input_ids"] = ids[:, :4].clone()
        extended.append(extra)
    if main == "input_ids" and "pixel_values" in parameters:
        extended.append({**extended[0], "pixel_values": pixels})
    if "decoder_input_ids" in parameters and not any("decoder_input_ids" in k for k in extended):
        extended.append({**extended[0], "decoder_input_ids": ids[:, :4].clone()})
    if main != "input_ids" and "input_ids" in parameters:
        # dual encoders / Q-formers whose main input is the image but whose forward needs text as well
        extended += [{**k, "input_ids": ids} for k in list(extended)]
    # Keys the forward does not name would be swallowed by its **kwargs (and refused by jacobiscope): drop them.
    named = {p for p in parameters if p not in ("args", "kwargs")}
    unique = []
    for kwargs in extended:
        kept = {k: v for k, v in kwargs.items() if k in named} if named else kwargs
        if kept and all(set(kept) != set(u) or any(kept[k].shape != u[k].shape for k in kept) for u in unique):
            unique.append(kept)
    return unique


def _video_frames(config) -> int:
    return _vision_int(config, "num_frames", 2)


def run_forward(model, kwargs):
    with torch.no_grad():
        try:
            return model(**kwargs, output_hidden_states=True, use_cache=False)
        except TypeError as error:
            if "use_cache" not in str(error):
                raise
            return model(**kwargs, output_hidden_states=True)


def hidden_state_tuples(output, prefix: str = "", depth: int = 0):
    """Every tuple/list of >= 2 tensors in a model output (recursing into nested outputs), with its name."""
    if depth > 3 or output is None:
        return
    items = output.items() if hasattr(output, "items") else enumerate(output) if isinstance(output, (tuple, list)) else ()
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (tuple, list)) and len(value) >= 2 and all(isinstance(v, torch.Tensor) for v in value):
            yield name, value
        elif hasattr(value, "items") or (isinstance(value, (tuple, list)) and value and not isinstance(value[0], torch.Tensor)):
            yield from hidden_state_tuples(value, name + ".", depth + 1)


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max()) / (float(b.abs().max()) + 1e-12)


def match_hidden_states(output, x0, layer):
    """The hidden-state tuple of ``output`` whose entry ``layer`` is ``x0`` (closest one), with its name and the
    window of tokens the model reports."""
    from jacobiscope.adapters._layouts import token_window

    best = None
    for name, states in hidden_state_tuples(output):
        if layer < len(states) and states[layer].shape == x0.shape:
            error = relative_difference(x0, states[layer])
            if best is None or error < best[2]:
                best = (name, states, error, slice(None))
    if best is not None and best[2] <= CHECK_TOLERANCE:
        return best
    # Only then a window of the blocks' tokens (CPM-Ant drops its prompt, Longformer its padding): an
    # encoder-decoder's decoder states would otherwise match the encoder's first tokens (same embeddings).
    for name, states in hidden_state_tuples(output):
        if layer >= len(states) or states[layer].shape == x0.shape:
            continue
        window = token_window(x0, states[layer])
        if window is not None:
            error = relative_difference(x0[:, window], states[layer])
            if best is None or error < best[2]:
                best = (name, states, error, window)
    return best


def _outputs_only_match(output, x0, stepped, layer, blocks):
    """For outputs that record block outputs only (``hidden_states[i]`` = output of block ``i``, as Mamba and
    RWKV do; no entry is the embeddings): the step matches entry ``layer`` and, past layer 0, ``x0`` is entry
    ``layer - 1``. None unless both hold and no tuple has the usual convention's ``x0`` at ``layer``."""
    usual = match_hidden_states(output, x0, layer)
    if usual is not None and usual[2] <= CHECK_TOLERANCE and usual[3] == slice(None):
        return None
    for name, states in hidden_state_tuples(output):
        if len(states) not in (blocks, blocks + 1) or layer >= len(states):
            continue
        step_error = relative_difference(stepped, states[layer])
        x0_error = relative_difference(x0, states[layer - 1]) if layer > 0 else 0.0
        if step_error <= CHECK_TOLERANCE and x0_error <= CHECK_TOLERANCE:
            return {"hidden_states": name, "count": len(states), "convention": "block outputs only",
                    "x0_error": x0_error if layer > 0 else None, "step_error": step_error, "ok": True}
    return None


# ----------------------------------------------------------------------------------------------- one model type

CHECK_TOLERANCE = 1e-4


def categorize(stage: str, error: BaseException | str) -> str:
    text = error if isinstance(error, str) else reason(error)
    if isinstance(error, Timeout) or "time limit" in text:
        return f"{stage}: timeout"
    if stage == "config":
        if "ImportError" in text or "ModuleNotFoundError" in text or "requires" in text and "library" in text:
            return "config: missing dependency"
        return "config: cannot construct/shrink"
    if stage == "build":
        if "Unrecognized configuration class" in text or "AutoModel" in text and "not" in text:
            return "build: no AutoModel class"
        if "ImportError" in text or "ModuleNotFoundError" in text or ("requires" in text and ("library" in text or "install" in text)):
            return "build: missing dependency"
        if "too large" in text:
            return "build: too large after shrinking"
        return "build: construction error (shrunk config inconsistent)"
    if stage == "inputs":
        return "inputs: no generic input ran the forward"
    if "Could not find the repeated blocks" in text:
        return f"{stage}: blocks not found (AdapterError)"
    if "never called" in text:
        return f"{stage}: capture: block never called"
    if "has no hidden state" in text:
        return f"{stage}: capture: no hidden state in the block's call"
    if "needs an adapter spec" in text:
        return f"{stage}: no adapter spec"
    if "no hidden-state tuple of the output has an entry" in text:
        return f"{stage}: x0 is in none of the output's hidden states (padded, reshaped or another tower)"
    if "RuntimeError: x0 is not" in text:
        return f"{stage}: x0 differs from the model's hidden state (random masking, internal padding)"
    if "step(x0) !=" in text:
        return f"{stage}: step(x0) differs from the model's next hidden state"
    if text.startswith("lambda_max is"):
        return f"{stage}: lambda_max not finite"
    return f"{stage}: {text.split(':')[0]}"


def sweep_one(model_type: str, limit: int, max_parameters: int) -> dict:
    import jacobiscope
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    record = {"model_type": model_type, "built": False, "block_ok": False, "block_last_ok": None,
              "check_adapter_ok": None, "attention_ok": None, "analyze_ok": False, "category": None, "reason": None,
              "notes": []}
    started = time.perf_counter()

    def fail(stage, error):
        if record["category"] is None:
            record["category"] = categorize(stage, error)
            record["reason"] = error if isinstance(error, str) else reason(error)

    # ---- config + build
    try:
        with time_limit(limit):
            with quiet():
                config_class = CONFIG_MAPPING[model_type]
                default = config_class()
            try:
                config = shrink_config(default)
            except Exception as error:  # noqa: BLE001
                fail("config", error)
                return record
            parameters = count_parameters_on_meta(config)
            record["parameters"] = parameters
            if parameters is not None and parameters > max_parameters:
                fail("build", f"too large after shrinking: {parameters / 1e6:.1f}M parameters (limit {max_parameters / 1e6:.0f}M)")
                return record
            model, attention_note = build_model(config)
            record["model_class"] = type(model).__name__
            record["attention_implementation"] = attention_note
            record["parameters"] = sum(p.numel() for p in model.parameters())
            record["built"] = True
    except Exception as error:  # noqa: BLE001
        fail("config" if "config" not in locals() else "build", error)
        return record
    finally:
        record["build_seconds"] = round(time.perf_counter() - started, 2)

    checks_started = time.perf_counter()
    try:
        with time_limit(limit):
            _checks(jacobiscope, model, record, fail)
    except Exception as error:  # noqa: BLE001 - a timeout or anything unforeseen in the harness
        fail("checks", error)
    finally:
        record["check_seconds"] = round(time.perf_counter() - checks_started, 2)
        del model
        gc.collect()
    return record


def _checks(jacobiscope, model, record, fail):
    # ---- inputs: the first candidate the forward accepts
    output, inputs, input_errors = None, None, []
    for kwargs in candidate_inputs(model):
        try:
            with quiet():
                output = run_forward(model, kwargs)
            inputs = kwargs
            break
        except Timeout:
            raise
        except Exception as error:  # noqa: BLE001
            input_errors.append(reason(error))
    if inputs is None:
        fail("inputs", input_errors[0] if input_errors else
             "no candidate inputs: the forward names none of input_ids / pixel_values / input_values / input_features")
        record["input_errors"] = input_errors[:8]
        return
    record["inputs"] = {k: list(v.shape) for k, v in inputs.items()}

    # ---- blocks
    try:
        path, blocks, spec = jacobiscope.adapters.find_blocks(model)
        record["blocks"] = f"{len(blocks)} x {type(blocks[0]).__name__} at '{path}'"
        record["adapter"] = spec.name if spec is not None else "generic"
    except Exception as error:  # noqa: BLE001
        fail("block", error)
        return
    last = len(blocks) - 1

    # ---- (a) block mode one-loop test, layers 0 and last
    block_details = {}
    for layer in sorted({0, last}):
        detail = {}
        try:
            with quiet():
                m = jacobiscope.looped_block(model, inputs, layer=layer, mode="block")
                with torch.no_grad():
                    stepped = m(m.x0)
            shifted = _outputs_only_match(output, m.x0, stepped, layer, len(blocks))
            if shifted is not None:
                # hidden_states[i] is the output of block i (Mamba, RWKV: no embedding entry)
                detail.update(shifted)
                block_details[layer] = detail
                continue
            match = match_hidden_states(output, m.x0, layer)
            if match is None:
                names = [f"{n}[{len(s)}]" for n, s in hidden_state_tuples(output)]
                raise RuntimeError(f"no hidden-state tuple of the output has an entry {layer} of shape "
                                   f"{tuple(m.x0.shape)} (tuples: {names or 'none'})")
            name, states, x0_error, window = match
            detail.update({"hidden_states": name, "count": len(states), "x0_error": x0_error})
            if window != slice(None):
                detail["reported_tokens"] = f"{window.start or 0}..{(window.stop or m.x0.shape[1]) - 1} of {m.x0.shape[1]}"
                stepped = stepped[:, window]
            if x0_error > CHECK_TOLERANCE:
                raise RuntimeError(f"x0 is not {name}[{layer}] (closest tuple, rel. difference {x0_error:.2e})")
            if layer + 1 >= len(states):
                raise RuntimeError(f"{name} has {len(states)} entries: no entry {layer + 1} for {len(blocks)} blocks")
            target = states[layer + 1]
            step_error = relative_difference(stepped, target)
            detail["step_error"] = step_error
            if step_error > CHECK_TOLERANCE:
                why = f"step(x0) != {name}[{layer + 1}]: "
                why += (f"shape {tuple(stepped.shape)} vs {tuple(target.shape)}" if stepped.shape != target.shape
                        else f"rel. difference {step_error:.2e}")
                if layer == last and len(states) == len(blocks) + 1:
                    last_hidden = getattr(output, "last_hidden_state", None)
                    if isinstance(last_hidden, torch.Tensor) and last_hidden.shape == target.shape and torch.equal(last_hidden, target):
                        why += " (the last entry is last_hidden_state: a final norm/projection is applied)"
                if len(states) != len(blocks) + 1:
                    why += f" ({name} has {len(states)} entries for {len(blocks)} blocks)"
                raise RuntimeError(why)
            detail["ok"] = True
        except Timeout:
            raise
        except Exception as error:  # noqa: BLE001
            detail.update({"ok": False, "reason": reason(error)})
        block_details[layer] = detail
    record["block"] = {str(k): v for k, v in block_details.items()}
    record["block_ok"] = bool(block_details[0].get("ok"))
    if last != 0:
        record["block_last_ok"] = bool(block_details[last].get("ok"))
    if not record["block_ok"]:
        fail("block", block_details[0]["reason"])
    elif last != 0 and not record["block_last_ok"]:
        record["notes"].append(f"last layer: {block_details[last]['reason']}")

    # ---- check_adapter (layer 0): recorded
    try:
        with quiet():
            result = jacobiscope.check_adapter(model, inputs, layers=[0], raise_on_failure=False)
        record["check_adapter_ok"] = result.passed
        failed = [f"{name}: {detail}" for name, ok, detail in result.checks if not ok]
        if failed:
            record["check_adapter_failed"] = failed[:4]
    except Timeout:
        raise
    except Exception as error:  # noqa: BLE001
        record["check_adapter_ok"] = False
        record["check_adapter_failed"] = [reason(error)]

    # ---- (b) attention mode: the spec's parts, or traced from the block's own call when no spec names them
    spec = jacobiscope.adapters.get_adapter_spec(model)
    record["attention_via"] = "spec" if spec is not None and spec.attention is not None else "traced"
    try:
        with quiet():
            m = jacobiscope.looped_block(model, inputs, layer=0, mode="attention")
            with torch.no_grad():
                out = m(m.x0)
        record["attention_ok"] = bool(out.shape == m.x0.shape and torch.isfinite(out).all())
        if not record["attention_ok"]:
            record["attention_reason"] = f"state {tuple(out.shape)} vs {tuple(m.x0.shape)}, finite={bool(torch.isfinite(out).all())}"
        elif record["attention_via"] == "traced":
            record["attention_parts"] = next((note.split("block: ", 1)[1] for note in m.meta["notes"]
                                              if "traced from one call of the block" in note), None)
    except Timeout:
        raise
    except Exception as error:  # noqa: BLE001
        text = reason(error)
        if isinstance(error, jacobiscope.adapters.AdapterError) and record["attention_via"] == "traced" and any(
                words in text for words in _NO_ITRSA_FORM):
            record["attention_ok"] = None  # the family has no ItrSA-form attention to read off: block mode only
            record["attention_reason"] = f"n/a: {text}"
        else:
            record["attention_ok"] = False
            record["attention_reason"] = text
    if record["attention_ok"] is False:
        record["notes"].append(f"attention: {record['attention_reason']}")

    # ---- (c) analyze
    try:
        with quiet():
            report = jacobiscope.analyze(model, inputs, layers=[0], loops=4, diagnostics=["lyapunov"], progress=False)
        value = report.rows[0].scalars()["lambda_max"]
        record["lambda_max"] = value
        record["analyze_ok"] = value is not None and math.isfinite(value)
        if not record["analyze_ok"]:
            fail("analyze", f"lambda_max is {value} (flags: {report.rows[0].flags})")
    except Timeout:
        raise
    except Exception as error:  # noqa: BLE001
        fail("analyze", error)
        record["analyze_reason"] = reason(error)


# ----------------------------------------------------------------------------------------------- driver


def _machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    import jacobiscope

    import subprocess

    try:  # the code measured: HEAD and whether jacobiscope/ differs from it (read-only git commands)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "jacobiscope"], cwd=HERE.parent,
                               capture_output=True, text=True, timeout=30).stdout.strip()
        git = {"head": head, "jacobiscope_modified_files": len(dirty.splitlines()) if dirty else 0}
    except Exception:  # noqa: BLE001
        git = None
    return {"cpu": cpu, "cores": os.cpu_count(), "git": git, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "jacobiscope": getattr(jacobiscope, "__version__", "?"),
            "load_average_start": os.getloadavg()}


def _write(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(payload, indent=1, default=str))
    temporary.replace(path)


# The trace's own refusals: a block with no attention of the ItrSA form (post-norm on the branch, no attention
# module, layers spread over parallel lists) is block mode only, not an attention-mode failure.
_NO_ITRSA_FORM = ("shows no attention sub-layer of the ItrSA form", "no submodule whose class is an attention",
                  "no norm submodule", "is not available for", "adds the residual itself")


def _counts(records: list[dict]) -> dict:
    return {
        "N": len(records),
        "built": sum(r["built"] for r in records),
        "block_ok": sum(bool(r["block_ok"]) for r in records),
        "block_last_ok": sum(bool(r.get("block_last_ok")) for r in records),
        "check_adapter_ok": sum(bool(r.get("check_adapter_ok")) for r in records),
        "attention_ok": sum(r.get("attention_ok") is True for r in records),
        "attention_tried": sum(r.get("attention_ok") is not None for r in records),
        "attention_traced_ok": sum(r.get("attention_ok") is True and r.get("attention_via") == "traced"
                                   for r in records),
        "analyze_ok": sum(bool(r["analyze_ok"]) for r in records),
    }


def summary(payload: dict) -> str:
    records = list(payload["results"].values())
    counts = _counts(records)
    lines = [f"breadth sweep: {counts['N']} model types ({payload.get('started', '?')}, transformers "
             f"{payload.get('machine', {}).get('transformers', '?')})",
             f"  built {counts['built']} / block-ok {counts['block_ok']} / attention-ok {counts['attention_ok']} "
             f"(of {counts['attention_tried']} with an ItrSA-form attention; {counts['attention_traced_ok']} traced, "
             f"no spec) / analyze-ok {counts['analyze_ok']}  out of {counts['N']}",
             f"  block last layer ok {counts['block_last_ok']}, check_adapter passed {counts['check_adapter_ok']}"]
    by_category = defaultdict(list)
    for r in records:
        if r.get("category"):
            by_category[r["category"]].append(r)
    lines.append("failures by category:")
    for category, rows in sorted(by_category.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  [{len(rows)}] {category}")
        reasons = Counter(_normalize(r["reason"]) for r in rows)
        for text, count in reasons.most_common(6):
            examples = [r["model_type"] for r in rows if _normalize(r["reason"]) == text][:5]
            lines.append(f"      {count:3d} x {text[:150]}  e.g. {', '.join(examples)}")
    return "\n".join(lines)


def _normalize(text: str | None) -> str:
    text = text or ""
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    text = re.sub(r"'[A-Za-z0-9_.]+'", "'X'", text)
    text = re.sub(r"\b[A-Z][A-Za-z0-9]+(Model|Config|Layer|Block|DecoderLayer|EncoderLayer)\b", "<Class>", text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="these model types only")
    parser.add_argument("--limit", type=int, default=60, help="seconds per model type for building, and for the checks")
    parser.add_argument("--max-parameters", type=float, default=40e6)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--resume", action="store_true", help="continue a partial output file")
    parser.add_argument("--summary", action="store_true", help="print the summary of --out and exit")
    parser.add_argument("--memory-gb", type=float, default=10.0, help="address-space limit of this process")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(json.loads(args.out.read_text())))
        return 0
    torch.set_num_threads(1)
    if args.memory_gb:
        limit = int(args.memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    types = list(CONFIG_MAPPING_NAMES)
    if args.only:
        unknown = [t for t in args.only if t not in CONFIG_MAPPING_NAMES]
        if unknown:
            parser.error(f"unknown model types {unknown}")
        types = list(args.only)
    payload = {"started": _dt.datetime.now().isoformat(timespec="seconds"), "machine": _machine(),
               "settings": {"limit_s": args.limit, "max_parameters": args.max_parameters, "hidden": HIDDEN,
                            "layers": LAYERS, "heads": HEADS, "tolerance": CHECK_TOLERANCE},
               "total_types": len(types), "current": None, "results": {}}
    if args.resume and args.out.exists():
        previous = json.loads(args.out.read_text())
        payload["started"] = previous.get("started", payload["started"])
        payload["results"] = previous.get("results", {})
        crashed = previous.get("current")
        if crashed and crashed not in payload["results"]:
            payload["results"][crashed] = {"model_type": crashed, "built": False, "block_ok": False,
                                           "analyze_ok": False, "attention_ok": None, "category": "crash",
                                           "reason": "the interpreter died on this model type (segfault or killed)",
                                           "notes": []}
    for position, model_type in enumerate(types):
        if model_type in payload["results"]:
            continue
        payload["current"] = model_type
        _write(args.out, payload)
        begun = time.perf_counter()
        try:
            with quiet():
                record = sweep_one(model_type, args.limit, int(args.max_parameters))
        except Exception as error:  # noqa: BLE001 - never lose the sweep to one type
            record = {"model_type": model_type, "built": False, "block_ok": False, "analyze_ok": False,
                      "attention_ok": None, "category": "harness", "reason": reason(error),
                      "traceback": traceback.format_exc()[-800:], "notes": []}
        record["seconds"] = round(time.perf_counter() - begun, 2)
        payload["results"][model_type] = record
        payload["current"] = None
        payload["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
        payload["machine"]["load_average_end"] = os.getloadavg()
        payload["counts"] = _counts(list(payload["results"].values()))
        _write(args.out, payload)
        flags = "".join("X" if record.get(k) else ("-" if record.get(k) is None else ".")
                        for k in ("built", "block_ok", "attention_ok", "analyze_ok"))
        print(f"[{position + 1}/{len(types)}] {model_type:40s} {flags} {record['seconds']:6.1f}s "
              f"{record.get('category') or ''}: {(record.get('reason') or '')[:100]}", flush=True)
        gc.collect()
    print(summary(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
