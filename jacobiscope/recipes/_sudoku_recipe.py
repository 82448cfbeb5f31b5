"""`SudokuRecipe`: everything a Sudoku training run needs, checked field by field on construction.

Example::

    >>> from jacobiscope.recipes.sudoku import SudokuRecipe
    >>> recipe = SudokuRecipe(arch="itrsa", hidden_size=64, loops_min=8, loops_max=24)
    >>> recipe.training_loops(), recipe.model_config()["hidden_size"]
    ((8, 24), 64)
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import RecipeError
from ._sudoku_fields import RECIPE_FIELDS

__all__ = ["SudokuRecipe"]


@dataclass
class SudokuRecipe:
    """Everything a training run needs; saved as ``recipe.json`` beside the checkpoints.

    Example::

        >>> from jacobiscope.recipes.sudoku import SudokuRecipe
        >>> SudokuRecipe(arch="akorn", hidden_size=64).model_config()["oscillator_dim"]
        4
    """

    arch: str = "itrsa"  # "itrsa" | "akorn"
    hidden_size: int = 128
    num_heads: int = 8
    loops: int = 16
    eta: float = 1.0  # itrsa
    norm: str = "rmsnorm"  # itrsa
    attention: str = "standard"  # itrsa
    attend_self: bool = True  # itrsa: False masks each cell's own score (e_multi trains only so)
    mlp_ratio: int = 0  # itrsa
    initializer_range: float = 0.02  # itrsa
    oscillator_dim: int = 4  # akorn
    oscillator_norm: bool = False  # akorn
    unit_embeddings: bool = False  # akorn
    learning_rate: float = 1e-3
    batch_size: int = 64
    epochs: float = 100.0
    max_steps: int = -1
    warmup_steps: int = 200
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    augment: bool = True
    ema_beta: float = 0.995
    ema_every: int = 10
    ema_start: int = 100
    seed: int = 0
    train_limit: int | None = None  # first n training rows (tests, smoke runs)
    init_from: str | None = None  # fine-tune: start from these weights (a folder or shipped name), not from scratch
    eval_limit: int = 500  # validation puzzles scored at each checkpoint (never test puzzles)
    # Training loop counts: each batch draws T uniformly from [loops_min, loops_max] (odd values included), so the
    # model cannot lean on one loop count or its parity; None trains at `loops` only.
    loops_min: int | None = None
    loops_max: int | None = None
    # Deep supervision: also score the readout after every `supervise_every` loops (None: the last loop only).
    supervise_every: int | None = None
    # Checkpoint selection on fresh generated puzzles (never on SATNet test or RRN): givens range, seed, and the
    # loop counts whose mean board accuracy is the score (default: [loops]).
    validation_givens: tuple = (31, 42)
    validation_seed: int = 20_261_201
    validation_loops: list | None = None
    # Stop (and save) once training has run this many seconds in this process: a run that must end inside a session
    # or a GPU lease ends with a checkpoint, and the next call resumes from it. None: no limit.
    max_seconds: float | None = None
    # Training data: "satnet" (rows 0-8999, the AKOrN / paper protocol) or "general" (`general_puzzles` puzzles from
    # the library's generator, givens drawn from `general_givens`, plus SATNet rows 0-8999; cached in the run folder).
    train_data: str = "satnet"
    general_puzzles: int = 30_000
    general_givens: tuple = (22, 45)
    general_seed: int = 7
    # Mixed precision: bf16 autocast (CPU with AMX, or GPU); the weights and the optimizer stay in fp32.
    bf16: bool = False
    # Run each training loop through torch.compile (the model's `compile_loop`): the same math, rounding aside;
    # 1.1-1.4x faster AKOrN steps on one CPU thread, ItrSA ~1.06x (benchmarks/RESULTS.md), after a first compile of
    # 5-60 s. Needs a C++ compiler on CPU. Validation and the shipped checkpoint run eager.
    compile_loop: bool = False
    save_steps: int = 500
    logging_steps: int = 50
    # Regularizers (any non-zero weight trains with SpectralRegTrainer; see SpectralRegTrainingArguments).
    spec_reg_weight: float = 0.0
    jacobian_reg_weight: float = 0.0
    energy_reg: str | None = None  # None | "e_single" | "e_multi"
    energy_reg_weight: float = 0.0
    # Where the Trainer's logs go besides trainer_state.json: transformers' integrations ("tensorboard" writes under
    # <run>/runs/, "wandb", "mlflow", ...); [] for none. The validation accuracies and the dynamics go there too.
    report_to: list = field(default_factory=list)
    # Every this many optimizer steps, the largest Lyapunov exponent, ||J|| and the regime of the loop on 4
    # validation puzzles (jacobiscope.training.LyapunovCallback), logged with the loss. None: not measured.
    dynamics_every: int | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    def validate(self) -> "SudokuRecipe":
        """Check every field (type, range, budget) and the fields that must agree; return the recipe.

        Raises `RecipeError` naming the field, what came and the fix. Called on construction and again by
        `train_sudoku` (a field set after construction is checked before any work). Tuples and lists normalize
        (``validation_givens`` is a tuple, ``validation_loops`` a list).

        Example::

            >>> from jacobiscope.recipes.sudoku import SudokuRecipe
            >>> SudokuRecipe(hidden_size=30, num_heads=8)
            Traceback (most recent call last):
            ...
            jacobiscope.errors.RecipeError: recipe: hidden_size=30 must be divisible by num_heads=8 — pick a hidden_size that is a multiple of num_heads (e.g. 32)
        """
        for item in fields(self):
            check, _policy = RECIPE_FIELDS[item.name]
            object.__setattr__(self, item.name, check(item.name, getattr(self, item.name)))
        hidden, heads = self.hidden_size, self.num_heads
        if hidden % heads:
            raise RecipeError(f"recipe: hidden_size={hidden} must be divisible by num_heads={heads} — pick a "
                              f"hidden_size that is a multiple of num_heads (e.g. {heads * -(-hidden // heads)})")
        if self.arch == "akorn":
            if (hidden // heads) % 4:
                raise RecipeError(f"recipe: akorn needs hidden_size / num_heads to be a multiple of 4 (2-D rotary), "
                                  f"got {hidden} / {heads} = {hidden // heads} — change hidden_size or num_heads")
            if self.oscillator_dim % 2 or hidden % self.oscillator_dim:
                raise RecipeError(f"recipe: akorn needs an even oscillator_dim that divides hidden_size, got "
                                  f"oscillator_dim={self.oscillator_dim}, hidden_size={hidden} — e.g. oscillator_dim=4")
        self.training_loops()
        if (self.energy_reg is None) != (self.energy_reg_weight == 0):
            raise RecipeError(f"recipe: energy_reg={self.energy_reg!r} with energy_reg_weight={self.energy_reg_weight!r} "
                              "does nothing — set both (e.g. energy_reg='e_multi', energy_reg_weight=0.01) or neither")
        if not self.attend_self and self.arch != "itrsa":
            raise RecipeError(f"recipe: attend_self=false masks ItrSA's attention, but arch is {self.arch!r} — set "
                              "attend_self to true (or arch to 'itrsa')")
        if self.energy_reg is not None and self.arch != "itrsa":
            raise RecipeError(f"recipe: energy_reg={self.energy_reg!r} needs arch 'itrsa' (it reads the attention "
                              f"weights), got arch={self.arch!r} — set energy_reg to null")
        return self

    def training_loops(self) -> tuple[int, int]:
        """The inclusive range of loop counts drawn for a training batch."""
        low = self.loops if self.loops_min is None else self.loops_min
        high = self.loops if self.loops_max is None else self.loops_max
        if not 1 <= low <= high:
            shown = (f"loops_min={self.loops_min}{' (null: loops)' if self.loops_min is None else ''}, loops_max="
                     f"{self.loops_max}{' (null: loops)' if self.loops_max is None else ''}, loops={self.loops}")
            raise RecipeError(f"loops_min/loops_max must satisfy 1 <= loops_min <= loops_max, got {low}, {high} "
                              f"({shown}) — swap them, or set both to null to train at loops only")
        return low, high

    def regularized(self) -> bool:
        return bool(self.spec_reg_weight or self.jacobian_reg_weight or (self.energy_reg and self.energy_reg_weight))

    def model_config(self) -> dict:
        if self.arch == "itrsa":
            return {"hidden_size": self.hidden_size, "num_heads": self.num_heads, "loops": self.loops, "eta": self.eta,
                    "norm": self.norm, "attention": self.attention, "mlp_ratio": self.mlp_ratio,
                    "initializer_range": self.initializer_range, "attend_self": self.attend_self}
        if self.arch == "akorn":
            return {"hidden_size": self.hidden_size, "num_heads": self.num_heads, "loops": self.loops,
                    "oscillator_dim": self.oscillator_dim, "oscillator_norm": self.oscillator_norm,
                    "unit_embeddings": self.unit_embeddings}
        raise RecipeError(f"arch must be 'itrsa' or 'akorn', got {self.arch!r} — set arch to one of them")

    @classmethod
    def from_json(cls, path) -> "SudokuRecipe":
        """Read a recipe file (UTF-8 JSON, a byte-order mark allowed); every problem is a `RecipeError` (a missing
        file a `jacobiscope.PathError`) naming the file, the key and the fix."""
        from ._recipe_files import read_recipe_file

        file, data = read_recipe_file(path, [f.name for f in fields(cls)], "SudokuRecipe",
                                      '{"arch": "itrsa", "max_steps": 1000}')
        recipe = cls(**data)
        recipe.source = file  # not a field: lets train_sudoku refuse an output folder that is this file
        return recipe
