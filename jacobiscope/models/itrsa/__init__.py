from .configuration_itrsa import ItrSAConfig
from .modeling_itrsa import ItrSAForSudoku, ItrSASudokuOutput

__all__ = ["ItrSAConfig", "ItrSAForSudoku", "ItrSASudokuOutput"]
