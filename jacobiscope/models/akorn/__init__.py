from .configuration_akorn import AKOrNConfig
from .modeling_akorn import AKOrNForSudoku, AKOrNSudokuOutput

__all__ = ["AKOrNConfig", "AKOrNForSudoku", "AKOrNSudokuOutput"]
