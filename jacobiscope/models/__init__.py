"""Reference looped Sudoku solvers as transformers models, registered with AutoConfig / AutoModel."""
from transformers import AutoConfig, AutoModel

from .akorn import AKOrNConfig, AKOrNForSudoku, AKOrNSudokuOutput
from .itrsa import ItrSAConfig, ItrSAForSudoku, ItrSASudokuOutput


def _register(config_class, model_class):
    try:
        AutoConfig.register(config_class.model_type, config_class)
    except ValueError:  # already registered (re-import)
        pass
    try:
        AutoModel.register(config_class, model_class)
    except ValueError:
        pass


_register(ItrSAConfig, ItrSAForSudoku)
_register(AKOrNConfig, AKOrNForSudoku)

__all__ = [
    "AKOrNConfig",
    "AKOrNForSudoku",
    "AKOrNSudokuOutput",
    "ItrSAConfig",
    "ItrSAForSudoku",
    "ItrSASudokuOutput",
]
