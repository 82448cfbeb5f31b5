"""A tiny IQuest-Coder Loop (``model_type`` "iquestloopcoder"): the decoder stack run ``loop_num`` times; loop 1 is
a plain causal pass whose keys and values (K1, V1) every later loop reads, mixed per head by a learned gate with
the later loop's own sliding-window attention.

Written for the tests from the structure of the public ``modeling_iquestloopcoder.py`` (the Hub repo
IQuestLab/IQuest-Coder-V1-40B-Loop-Instruct; read in the copy at GitHub luweigen/transformers 08a94ff): the same
module names (``model.embed_tokens``, ``model.layers[i].{self_attn.{q_proj, k_proj, v_proj, o_proj, rotary_emb},
mlp, input_layernorm, post_attention_layernorm, gate_projection}``, ``model.norm``, ``lm_head``), the config
fields, and the forward semantics of ``_forward_loop`` (prefill, no cache):

    h = embed_tokens(input_ids)
    loop 1: for each layer: K1_i, V1_i = self_attn.get_qkv(input_layernorm(h), position_ids)[1:]; h = layer(h, ...)[0]
    loops 2..loop_num: for each layer: h = layer.forward_loop2_mixed(h, k1=K1_i, v1=V1_i, attention_mask=...,
                                                                      position_ids=..., loop_window_size=...)[0]
    logits = lm_head(norm(h))

``forward_loop2_mixed``: ``q2, k2, v2 = get_qkv(input_layernorm(h))``, ``g = sigmoid(<q2, w_head> + b_head)`` per
head and token (``gate_projection``), attention ``A`` of q2 over (K1, V1) with the causal mask, ``B`` over (k2, v2)
with the causal mask and a sliding window of ``loop_window_size`` (plain causal when the text fits in it), then
``h + o_proj(g A + (1 - g) B)`` and the MLP residual.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


class IQuestLoopCoderConfig(PretrainedConfig):
    model_type = "iquestloopcoder"

    def __init__(self, vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=8, hidden_act="silu", max_position_embeddings=64, rms_norm_eps=1e-6,
                 rope_theta=500000.0, attention_bias=False, mlp_bias=False, attention_dropout=0.0,
                 initializer_range=0.2, loop_num=2, loop_window_size=64, use_cache=False, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.head_dim, self.hidden_act = num_key_value_heads, head_dim, hidden_act
        self.max_position_embeddings, self.rms_norm_eps, self.rope_theta = max_position_embeddings, rms_norm_eps, rope_theta
        self.attention_bias, self.mlp_bias, self.attention_dropout = attention_bias, mlp_bias, attention_dropout
        self.initializer_range, self.loop_num, self.loop_window_size = initializer_range, loop_num, loop_window_size
        self.use_cache = use_cache
        super().__init__(**kwargs)


class IQuestLoopCoderRMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


class IQuestLoopCoderRotaryEmbedding(nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        angles = position_ids[..., None].float() * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _rotated(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos.unsqueeze(1) + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin.unsqueeze(1)


def _attend(query, key, value, mask, window=None):
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = query @ key.transpose(2, 3) / math.sqrt(query.shape[-1]) + mask
    tokens = query.shape[2]
    if window is not None and tokens > window:
        row, col = torch.arange(tokens)[:, None], torch.arange(tokens)[None, :]
        scores = scores.masked_fill((col > row) | (col < row - window + 1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ value


class IQuestLoopCoderMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LoopGateProjection(nn.Module):
    def __init__(self, num_heads, head_dim):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.zeros(num_heads, head_dim)), nn.Parameter(torch.zeros(num_heads))

    def forward(self, query):
        return torch.sigmoid(torch.einsum("bhsd,hd->bhs", query, self.weight) + self.bias[None, :, None]).unsqueeze(-1)


class IQuestLoopCoderAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads, self.head_dim, self.layer_idx = config.num_attention_heads, config.head_dim, layer_idx
        self.num_key_value_heads = config.num_key_value_heads
        width, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(width, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(width, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, width, bias=bias)
        self.rotary_emb = IQuestLoopCoderRotaryEmbedding(self.head_dim, config.rope_theta)

    def get_qkv(self, hidden_states, position_ids=None):
        batch, tokens, _ = hidden_states.shape
        split = lambda t: t.view(batch, tokens, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(hidden_states)), split(self.k_proj(hidden_states)), split(self.v_proj(hidden_states))
        cos, sin = self.rotary_emb(v, position_ids)
        return _rotated(q, cos, sin), _rotated(k, cos, sin), v

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, **kwargs):
        q, k, v = self.get_qkv(hidden_states, position_ids)
        out = _attend(q, k, v, attention_mask)
        return self.o_proj(out.transpose(1, 2).reshape(*hidden_states.shape[:2], -1)), None, None


class IQuestLoopCoderDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn, self.mlp = IQuestLoopCoderAttention(config, layer_idx), IQuestLoopCoderMLP(config)
        self.input_layernorm = IQuestLoopCoderRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = IQuestLoopCoderRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.gate_projection = LoopGateProjection(config.num_attention_heads, config.head_dim)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                output_attentions=False, use_cache=False, cache_position=None, **kwargs):
        attended, _, _ = self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_ids)
        hidden_states = hidden_states + attended
        return (hidden_states + self.mlp(self.post_attention_layernorm(hidden_states)),)

    def forward_loop2_mixed(self, hidden_states, k1, v1, attention_mask=None, position_ids=None, loop_window_size=64):
        q2, k2, v2 = self.self_attn.get_qkv(self.input_layernorm(hidden_states), position_ids)
        gate = self.gate_projection(q2)
        gate_mean = gate.detach().mean().item()
        mixed = gate * _attend(q2, k1, v1, attention_mask) + (1 - gate) * _attend(q2, k2, v2, attention_mask,
                                                                                   loop_window_size)
        hidden_states = hidden_states + self.self_attn.o_proj(mixed.transpose(1, 2).reshape(*hidden_states.shape[:2], -1))
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states)), gate_mean


class IQuestLoopCoderPreTrainedModel(PreTrainedModel):
    config_class = IQuestLoopCoderConfig
    base_model_prefix = "model"

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding, LoopGateProjection)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                nn.init.normal_(module.bias, std=self.config.initializer_range)


class IQuestLoopCoderModel(IQuestLoopCoderPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(IQuestLoopCoderDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = IQuestLoopCoderRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.loop_num, self.loop_window_size = config.loop_num, config.loop_window_size
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, **kwargs):
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        batch, tokens = hidden.shape[:2]
        position_ids = torch.arange(tokens)[None] if position_ids is None else position_ids
        low = torch.finfo(hidden.dtype).min
        mask = torch.triu(torch.full((tokens, tokens), low, dtype=hidden.dtype), diagonal=1)[None, None]
        mask = mask.expand(batch, 1, -1, -1).clone()
        if attention_mask is not None:
            mask = mask.masked_fill(attention_mask[:, None, None, :] == 0, low)
        kv = []
        for layer in self.layers:  # loop 1: plain causal, its keys and values kept
            kv.append(layer.self_attn.get_qkv(layer.input_layernorm(hidden), position_ids)[1:])
            hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, past_key_value=None,
                           use_cache=False)[0]
        for _loop in range(2, self.loop_num + 1):
            for layer, (k1, v1) in zip(self.layers, kv):
                hidden, _ = layer.forward_loop2_mixed(hidden, k1=k1, v1=v1, attention_mask=mask,
                                                      position_ids=position_ids, loop_window_size=self.loop_window_size)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))


class IQuestLoopCoderForCausalLM(IQuestLoopCoderPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = IQuestLoopCoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, **kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            inputs_embeds=inputs_embeds).last_hidden_state
        return CausalLMOutputWithPast(logits=self.lm_head(hidden).float())
