"""`LoopedLMRecipe`: a looped language model of a native transformers family trained on a text task, checked field
by field on construction; `build_model` makes the model from it, `set_loops` turns its loop knob.

Example::

    >>> from jacobiscope.recipes.looped_lm import LoopedLMRecipe, build_model
    >>> recipe = LoopedLMRecipe(family="dory", hidden_size=32, intermediate_size=64, num_heads=2, loops=3)
    >>> model = build_model(recipe)
    >>> type(model).__name__, model.config.n_recurrent_loops, model.config.vocab_size
    ('DoryForCausalLM', 3, 50)
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import RecipeError
from ._looped_lm_eval_checks import LOOP_KNOBS as _EVAL_KNOBS
from ._looped_lm_fields import LOOPED_LM_FIELDS

__all__ = ["LoopedLMRecipe", "LOOP_KNOBS", "build_model", "set_loops", "get_loops"]

#: The config attribute each family's forward reads for its loop count (read at every forward, so setting it on
#: ``model.config`` between two forwards changes the depth of the next one); derived from the evaluation's table
#: (which also knows the recurrence behind each knob), so the two cannot disagree.
LOOP_KNOBS = {family: _EVAL_KNOBS[family].attribute for family in ("hrm_text", "dory", "inkling2_loop")}


@dataclass
class LoopedLMRecipe:
    """Everything a looped-LM training run needs; saved as ``recipe.json`` in the run folder.

    ``loops`` is the trained depth (saved in the model's config, validated at every save); ``loops_min`` /
    ``loops_max`` draw each batch's loop count uniformly from that range (null: the fixed count ``loops``).
    ``num_layers`` is the depth of the looped stack (HRM-Text: layers per stack; Dory: recurrent layers; Inkling-2
    loop: looped layers), ``inner_loops`` HRM-Text's L_cycles, ``num_experts`` / ``experts_per_token`` Inkling-2's
    mixture of experts. ``attention_window`` (Dory only) makes every layer a sliding-window layer that sees that many
    tokens, itself included (null: full attention): with a window of 2 a token hears one cell further per layer, so
    the loop count bounds how far information travels and a task's depth cannot be shortcut in one pass. ``curriculum_steps`` opens the task's train levels one at a time over that many first steps
    (easiest first; 0: every level from the start; see `GeneratedTaskDataset`). ``target_exact_match`` ends the run at the first save whose validation exact match at the
    trained depth reaches it (null: train to ``max_steps``); ``max_seconds`` ends it after that much time (a later
    call resumes).

    Example::

        >>> from jacobiscope.recipes.looped_lm import LoopedLMRecipe
        >>> LoopedLMRecipe(loops=4, loops_min=2, loops_max=6).training_loops()
        (2, 6)
        >>> LoopedLMRecipe(hidden_size=100, num_heads=8)
        Traceback (most recent call last):
        ...
        jacobiscope.errors.RecipeError: recipe: hidden_size=100 must be divisible by num_heads=8 — pick a hidden_size that is a multiple of num_heads (e.g. 104)
    """

    family: str = "dory"
    task: str = "addition"
    hidden_size: int = 128
    intermediate_size: int = 256
    num_heads: int = 4
    num_layers: int = 1
    inner_loops: int = 1
    num_experts: int = 4
    experts_per_token: int = 2
    attention_window: int | None = None
    loops: int = 4
    loops_min: int | None = None
    loops_max: int | None = None
    learning_rate: float = 1e-3
    batch_size: int = 32
    curriculum_steps: int = 0
    max_steps: int = 4000
    warmup_steps: int = 100
    max_grad_norm: float = 1.0
    weight_decay: float = 0.01
    ema_beta: float = 0.99
    ema_every: int = 5
    ema_start: int = 200
    seed: int = 0
    validation_examples: int = 500
    validation_seed: int = 20_261_203
    validation_loops: list | None = None
    save_steps: int = 250
    logging_steps: int = 50
    max_seconds: float | None = None
    target_exact_match: float | None = None
    threads: int | None = None
    report_to: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    bf16: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> "LoopedLMRecipe":
        """Check every field and the fields that must agree; return the recipe (`RecipeError` names the fix)."""
        for item in fields(self):
            check, _policy = LOOPED_LM_FIELDS[item.name]
            object.__setattr__(self, item.name, check(item.name, getattr(self, item.name)))
        hidden, heads = self.hidden_size, self.num_heads
        if hidden % heads or (hidden // heads) % 2:
            raise RecipeError(f"recipe: hidden_size={hidden} must be divisible by num_heads={heads} — pick a "
                              f"hidden_size that is a multiple of num_heads (e.g. {heads * -(-hidden // heads)})"
                              if hidden % heads else
                              f"recipe: hidden_size / num_heads = {hidden // heads} must be even (rotary "
                              f"embeddings) — pick hidden_size={heads * (hidden // heads + 1)}")
        if self.experts_per_token > self.num_experts:
            raise RecipeError(f"recipe: experts_per_token={self.experts_per_token} is more than num_experts="
                              f"{self.num_experts} — set experts_per_token <= num_experts")
        if self.family != "hrm_text" and self.inner_loops != 1:
            raise RecipeError(f"recipe: inner_loops={self.inner_loops} is HRM-Text's L_cycles, but family is "
                              f"{self.family!r} — set inner_loops to 1 (or family to 'hrm_text')")
        if self.attention_window is not None and self.family != "dory":
            raise RecipeError(f"recipe: attention_window={self.attention_window} is Dory's sliding window, but family "
                              f"is {self.family!r} — set attention_window to null (or family to 'dory')")
        self.training_loops()
        return self

    def training_loops(self) -> tuple[int, int]:
        """The inclusive range of loop counts drawn for a training batch."""
        low = self.loops if self.loops_min is None else self.loops_min
        high = self.loops if self.loops_max is None else self.loops_max
        if not 1 <= low <= high:
            raise RecipeError(f"loops_min/loops_max must satisfy loops_min <= loops_max, got {low}, {high} — swap "
                              "them, or set both to null to train at loops only")
        return low, high

    def to_dict(self) -> dict:
        return {item.name: getattr(self, item.name) for item in fields(self)}

    @classmethod
    def from_json(cls, path) -> "LoopedLMRecipe":
        """Read a recipe file (UTF-8 JSON object of fields); problems are `RecipeError` (a missing file a
        `jacobiscope.PathError`) naming the file, the key and the fix."""
        from ._recipe_files import read_recipe_file

        _, data = read_recipe_file(path, [item.name for item in fields(cls)], "LoopedLMRecipe",
                                   '{"family": "dory", "task": "addition5"}')
        return cls(**data)


def _tokens() -> dict:
    from ..data.tasks import task_tokenizer

    tok = task_tokenizer()
    return {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id}


def model_config(recipe: LoopedLMRecipe):
    """The transformers config of ``recipe``'s model (a tiny one of its family, the task vocabulary)."""
    import transformers

    r, tokens = recipe, _tokens()
    head_dim = r.hidden_size // r.num_heads
    shared = dict(hidden_size=r.hidden_size, num_attention_heads=r.num_heads, head_dim=head_dim,
                  max_position_embeddings=256, **tokens)
    if r.family == "hrm_text":
        # prefix_lm off: the prompt is read causally, as the eval and the loop lens feed it (no token_type_ids).
        return transformers.HrmTextConfig(intermediate_size=r.intermediate_size, num_hidden_layers=r.num_layers,
                                          H_cycles=r.loops, L_cycles=r.inner_loops, prefix_lm=False, **shared)
    if r.family == "dory":
        # One input and one output layer around the looped stack; full attention everywhere (short sequences) unless
        # the recipe asks for a sliding window, which then bounds every layer.
        layers = r.num_layers + 2
        window = {} if r.attention_window is None else {"sliding_window": r.attention_window}
        kind = "full_attention" if r.attention_window is None else "sliding_attention"
        return transformers.DoryConfig(intermediate_size=r.intermediate_size, num_hidden_layers=layers,
                                       n_input_layers=1, n_output_layers=1, num_key_value_heads=r.num_heads,
                                       n_recurrent_loops=r.loops, layer_types=[kind] * layers, **window, **shared)
    layers = r.num_layers + 2
    shared.pop("max_position_embeddings")
    return transformers.Inkling2LoopTextConfig(
        unpadded_vocab_size=tokens["vocab_size"], num_hidden_layers=layers, num_key_value_heads=r.num_heads,
        swa_num_attention_heads=r.num_heads, swa_num_key_value_heads=r.num_heads, swa_head_dim=head_dim,
        sliding_window_size=256, d_rel=8, rel_extent=64, moe_intermediate_size=r.intermediate_size,
        n_routed_experts=r.num_experts, num_experts_per_tok=r.experts_per_token, conv_kernel_size=3,
        n_layers_per_attn_res_block=1, loop_layer_index_start=1, loop_layer_index_end=1 + r.num_layers,
        loop_num_passes=r.loops, loop_gate_rank=8, layer_types=["hybrid"] * layers, **shared)


def build_model(recipe: LoopedLMRecipe):
    """A freshly initialized ``*ForCausalLM`` of ``recipe.family`` (seed torch first for the same weights)."""
    import transformers

    classes = {"hrm_text": transformers.HrmTextForCausalLM, "dory": transformers.DoryForCausalLM,
               "inkling2_loop": transformers.Inkling2LoopForCausalLM}
    return classes[recipe.family](model_config(recipe))


def _knob(model) -> str:
    model_type = getattr(model.config, "model_type", None)
    for family, knob in LOOP_KNOBS.items():
        if model_type is not None and model_type.startswith(family):
            return knob
    raise RecipeError(f"{type(model).__name__} (model_type {model_type!r}) is not a looped family this recipe "
                      f"trains — use one of {sorted(LOOP_KNOBS)}")


def set_loops(model, loops: int) -> None:
    """Set the loop count the next forward of ``model`` runs (its family's config knob, see `LOOP_KNOBS`)."""
    setattr(model.config, _knob(model), int(loops))


def get_loops(model) -> int:
    """The loop count ``model``'s next forward runs."""
    return int(getattr(model.config, _knob(model)))
