"""A tiny Huginn / Raven (``model_type`` "huginn_raven"): prelude, a recurrent core fed the prelude's output
through an adapter every step from a random initial state, then the coda.

Written for the tests from the structure of the public ``raven_modeling_minimal.py`` (the Hub repo
tomg-group-umd/huginn-0125; followed at GitHub seal-rg/recurrent-pretraining 0d9ed97, recpre/): the same module
names (``transformer.{wte, prelude, adapter, core_block, coda, ln_f}``, ``lm_head``, ``freqs_cis``; blocks are
``SandwichBlock`` with ``norm_1..norm_4``, ``attn.{Wqkv, proj}``, ``mlp.{fc, proj}``), the config fields, and the
forward semantics:

    e = wte(input_ids) * emb_scale;  e = prelude(e)
    x = input_states, or a truncated-normal draw (std init_values["std"], times emb_scale)
    num_steps times:  x = core_block(adapter(cat([x, e], -1)))
    x = ln_f(x);  logits = lm_head(ln_f(coda(x)))            # ln_f is applied twice

Blocks are sandwiches: ``x = norm_2(attn(norm_1(x)) + x)``, ``x = norm_4(mlp(norm_3(x)) + x)``; attention is
causal (the public revision builds no padding mask: ``attention_mask`` is accepted and unused).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput


class RavenConfig(PretrainedConfig):
    model_type = "huginn_raven"
    attribute_map = {"num_attention_heads": "n_heads", "hidden_size": "n_embd", "num_hidden_layers": "n_layers"}

    def __init__(self, n_embd=16, n_heads=2, n_layers=4, block_size=64, vocab_size=40, padding_multiple=8,
                 tie_embeddings=True, intermediate_size=32, bias=False, n_layers_in_recurrent_block=2,
                 mean_recurrence=4, mean_backprop_depth=2, n_layers_in_prelude=1, n_layers_in_coda=1, qk_bias=True,
                 init_values=None, norm_eps=1e-6, rope_base=50000, test_time_noise=0.0, test_time_noise_type="fixed",
                 num_key_value_heads=None, **kwargs):
        self.n_embd, self.n_heads, self.n_layers, self.block_size = n_embd, n_heads, n_layers, block_size
        self.vocab_size, self.padding_multiple, self.tie_embeddings = vocab_size, padding_multiple, tie_embeddings
        self.intermediate_size, self.bias, self.qk_bias = intermediate_size, bias, qk_bias
        self.n_layers_in_recurrent_block, self.n_layers_in_prelude = n_layers_in_recurrent_block, n_layers_in_prelude
        self.n_layers_in_coda, self.mean_recurrence = n_layers_in_coda, mean_recurrence
        self.mean_backprop_depth, self.norm_eps, self.rope_base = mean_backprop_depth, norm_eps, rope_base
        self.test_time_noise, self.test_time_noise_type = test_time_noise, test_time_noise_type
        self.num_key_value_heads = num_key_value_heads or n_heads
        self.init_values = init_values or {"std": math.sqrt(2 / (5 * n_embd)), "embed_scale": math.sqrt(n_embd)}
        super().__init__(**kwargs)

    @property
    def padded_vocab_size(self):
        return -(-self.vocab_size // self.padding_multiple) * self.padding_multiple


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_pairs(x, freqs):
    """Rotate consecutive feature pairs by the position's angles; ``freqs`` holds (cos, sin) in its last axis."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    cos, sin = freqs[..., 0].unsqueeze(2), freqs[..., 1].unsqueeze(2)  # [1, S, 1, head_dim / 2]
    turned = torch.stack((pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 0] * sin + pairs[..., 1] * cos), -1)
    return turned.reshape(x.shape)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = config.n_heads, config.num_key_value_heads, config.n_embd // config.n_heads
        self.chunks = [config.n_embd, self.n_kv * self.head_dim, self.n_kv * self.head_dim]
        self.Wqkv = nn.Linear(config.n_embd, sum(self.chunks), bias=False)
        if config.qk_bias:
            self.qk_bias = nn.Parameter(0.1 * torch.randn(2, 1, self.n_head, self.head_dim))
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x, freqs_cis, block_idx, mask=None, past_key_values=None):
        batch, tokens, width = x.shape
        q, k, v = self.Wqkv(x).split(self.chunks, dim=2)
        q, k = q.view(batch, tokens, self.n_head, -1), k.view(batch, tokens, self.n_kv, -1)
        v = v.view(batch, tokens, self.n_kv, -1)
        if hasattr(self, "qk_bias"):
            q, k = q + self.qk_bias[0], k + self.qk_bias[1]
        q, k = _rotate_pairs(q, freqs_cis), _rotate_pairs(k, freqs_cis)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv != self.n_head)
        return self.proj(y.transpose(1, 2).reshape(batch, tokens, width))


class GatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 2 * config.intermediate_size, bias=False)
        self.proj = nn.Linear(config.intermediate_size, config.n_embd, bias=False)
        self.nonlin = nn.SiLU()

    def forward(self, x):
        gate, value = self.fc(x).chunk(2, dim=-1)
        return self.proj(self.nonlin(gate) * value)


class SandwichBlock(nn.Module):
    def __init__(self, config, layer_id):
        super().__init__()
        self.norm_1, self.norm_2 = RMSNorm(config.n_embd, config.norm_eps), RMSNorm(config.n_embd, config.norm_eps)
        self.norm_3, self.norm_4 = RMSNorm(config.n_embd, config.norm_eps), RMSNorm(config.n_embd, config.norm_eps)
        self.attn, self.mlp, self.layer_id = CausalSelfAttention(config), GatedMLP(config), layer_id

    def forward(self, x, freqs_cis, step_idx, mask=None, past_key_values=None):
        x = self.norm_2(self.attn(self.norm_1(x), freqs_cis, step_idx, mask, past_key_values) + x)
        return self.norm_4(self.mlp(self.norm_3(x)) + x)


@dataclass
class RavenOutput(ModelOutput):
    logits: torch.Tensor | None = None
    latent_states: torch.Tensor | None = None


class RavenForCausalLM(PreTrainedModel):
    config_class = RavenConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        blocks = lambda count, first: nn.ModuleList(SandwichBlock(config, first + i) for i in range(count))  # noqa: E731
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.padded_vocab_size, config.n_embd),
            prelude=blocks(config.n_layers_in_prelude, 0),
            adapter=nn.Linear(2 * config.n_embd, config.n_embd, bias=config.bias),
            core_block=blocks(config.n_layers_in_recurrent_block, config.n_layers_in_prelude),
            coda=blocks(config.n_layers_in_coda, config.n_layers - config.n_layers_in_coda),
            ln_f=RMSNorm(config.n_embd, config.norm_eps)))
        self.emb_scale = config.init_values["embed_scale"]
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        head_dim = config.n_embd // config.n_heads
        angles = torch.outer(torch.arange(config.block_size, dtype=torch.float32),
                             1.0 / config.rope_base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("freqs_cis", torch.stack((angles.cos(), angles.sin()), -1)[None], persistent=True)

    def _init_weights(self, module):
        pass  # the tests draw their own weights

    def initialize_state(self, input_embeds, scale=1.0):
        std = self.config.init_values["std"] * scale
        x = torch.randn_like(input_embeds)
        nn.init.trunc_normal_(x, mean=0.0, std=std, a=-3 * std, b=3 * std)
        return x * self.emb_scale

    def core_block_forward(self, x, input_embeds, freqs_cis, mask, past_key_values, block_idx, current_step):
        x = self.transformer.adapter(torch.cat([x, input_embeds], dim=-1))
        for block in self.transformer.core_block:
            block_idx += 1
            x = block(x, freqs_cis, block_idx, mask, past_key_values)
        return x, block_idx

    def forward(self, input_ids, input_embeds=None, input_states=None, attention_mask=None, position_ids=None,
                labels=None, num_steps=None, past_key_values=None, use_cache=False, init_scale=1.0, **kwargs):
        freqs = self.freqs_cis[:, : input_ids.shape[1]]
        embeds = (self.transformer.wte(input_ids) if input_embeds is None else input_embeds) * self.emb_scale
        block_idx = torch.tensor(-1)
        for block in self.transformer.prelude:
            block_idx += 1
            embeds = block(embeds, freqs, block_idx, None, None)
        x = self.initialize_state(embeds, init_scale) if input_states is None else input_states.clone()
        steps = self.config.mean_recurrence if num_steps is None else int(num_steps)
        for step in range(steps):
            x, block_idx = self.core_block_forward(x, embeds, freqs, None, None, block_idx, step)
        x = latent = self.transformer.ln_f(x)
        block_idx = torch.tensor(0)
        for block in self.transformer.coda:
            block_idx -= 1
            x = block(x, freqs, block_idx, None, None)
        return RavenOutput(logits=self.lm_head(self.transformer.ln_f(x)).float(), latent_states=latent)
