"""A tiny Ouro (``model_type`` "ouro"): the decoder stack applied ``total_ut_steps`` times, each pass closed by
the final norm, an early-exit gate read after every pass.

Written for the tests from the structure of ByteDance's public ``modeling_ouro.py`` (the Hub repo
ByteDance/Ouro-1.4B, as mirrored in GitHub Eagle4398/ouro-nixpkgs at d4f815e): the same module names (``model.
embed_tokens``, ``model.layers[i].{self_attn, mlp, input_layernorm, input_layernorm_2, post_attention_layernorm,
post_attention_layernorm_2}``, ``model.norm``, ``model.rotary_emb``, ``model.early_exit_gate``, ``lm_head``), the
config fields, and the forward semantics:

    h = embed_tokens(input_ids)
    for ut in range(total_ut_steps):
        for layer in layers: h = layer(h, attention_mask=<mask of its attention type>, position_embeddings=...)
        h = norm(h)                      # the carried state is normalized
        hidden_states_list.append(h); gate_list.append(early_exit_gate(h))
    logits = lm_head(h)                  # or lm_head(hidden_states_list[exit_at_step])

Each layer is a sandwich: ``h + input_layernorm_2(attn(input_layernorm(h)))``, then ``h +
post_attention_layernorm_2(mlp(post_attention_layernorm(h)))``. No KV cache (the tests run single forwards).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


class OuroConfig(PretrainedConfig):
    model_type = "ouro"

    def __init__(self, vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=None, hidden_act="silu",
                 max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=None,
                 layer_types=None, attention_dropout=0.0, total_ut_steps=4, early_exit_step=None,
                 early_exit_threshold=None, initializer_range=0.2, use_cache=False, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.hidden_act, self.max_position_embeddings, self.rms_norm_eps = hidden_act, max_position_embeddings, rms_norm_eps
        self.rope_theta, self.sliding_window, self.attention_dropout = rope_theta, sliding_window, attention_dropout
        self.layer_types = list(layer_types or ["full_attention"] * num_hidden_layers)
        self.total_ut_steps, self.early_exit_step = total_ut_steps, early_exit_step
        self.early_exit_threshold, self.initializer_range, self.use_cache = early_exit_threshold, initializer_range, use_cache
        super().__init__(**kwargs)


class OuroRMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * (x * scale)


class OuroMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def _rotated(x, cos, sin):
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class OuroAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config, self.layer_idx, self.head_dim = config, layer_idx, config.head_dim
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, **_ignored):
        batch, tokens, _ = hidden_states.shape
        split = lambda t: t.view(batch, tokens, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(hidden_states)), split(self.k_proj(hidden_states)), split(self.v_proj(hidden_states))
        cos, sin = (part.unsqueeze(1) for part in position_embeddings)
        q, k = _rotated(q, cos, sin), _rotated(k, cos, sin)
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5 + attention_mask
        out = torch.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(batch, tokens, -1)), None


class OuroDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn, self.mlp = OuroAttention(config, layer_idx), OuroMLP(config)
        eps = config.rms_norm_eps
        self.input_layernorm, self.input_layernorm_2 = OuroRMSNorm(config.hidden_size, eps), OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm_2 = OuroRMSNorm(config.hidden_size, eps)
        self.attention_type = config.layer_types[layer_idx]

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False,
                cache_position=None, position_embeddings=None, current_ut=0, **kwargs):
        attended, _ = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask)
        hidden_states = hidden_states + self.input_layernorm_2(attended)
        return hidden_states + self.post_attention_layernorm_2(self.mlp(self.post_attention_layernorm(hidden_states)))


class OuroRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        exponents = torch.arange(0, config.head_dim, 2, dtype=torch.float32) / config.head_dim
        self.register_buffer("inv_freq", 1.0 / config.rope_theta ** exponents, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        angles = position_ids[..., None].float() * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _masks(config, attention_mask, batch, tokens, dtype):
    """Additive masks per attention type: causal, padded keys hidden, and the sliding window where configured."""
    query, key = torch.arange(tokens)[:, None], torch.arange(tokens)[None, :]
    keys = torch.ones(batch, tokens, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    allowed = {"full_attention": (key <= query)[None] & keys[:, None, :]}
    window = config.sliding_window or tokens
    allowed["sliding_attention"] = allowed["full_attention"] & (query - key < window)[None]
    low = torch.finfo(dtype).min
    return {name: torch.zeros(a.shape, dtype=dtype).masked_fill(~a, low)[:, None] for name, a in allowed.items()}


class OuroPreTrainedModel(PreTrainedModel):
    config_class = OuroConfig
    base_model_prefix = "model"

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


class OuroModel(OuroPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(OuroDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = OuroRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = OuroRotaryEmbedding(config)
        self.total_ut_steps = config.total_ut_steps
        self.early_exit_gate = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, cache_position=None, **kwargs):
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        batch, tokens = hidden.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(tokens)[None].expand(batch, -1)
        masks = _masks(self.config, attention_mask, batch, tokens, hidden.dtype)
        rotary = self.rotary_emb(hidden, position_ids)
        states, gates = [], []
        for current_ut in range(self.total_ut_steps):
            for layer in self.layers[: self.config.num_hidden_layers]:
                hidden = layer(hidden, attention_mask=masks[layer.attention_type], position_ids=position_ids,
                               past_key_value=None, use_cache=False, cache_position=cache_position,
                               position_embeddings=rotary, current_ut=current_ut)
            hidden = self.norm(hidden)
            states.append(hidden)
            gates.append(self.early_exit_gate(hidden))
        return BaseModelOutputWithPast(last_hidden_state=hidden), states, gates


class OuroForCausalLM(OuroPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = OuroModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, cache_position=None, exit_at_step=None, **kwargs):
        outputs, states, _gates = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                             position_ids=position_ids, inputs_embeds=inputs_embeds)
        exit_at_step = self.config.early_exit_step if exit_at_step is None else exit_at_step
        chosen = states[exit_at_step] if exit_at_step is not None and 0 <= exit_at_step < len(states) else (
            outputs.last_hidden_state)
        return CausalLMOutputWithPast(logits=self.lm_head(chosen))
