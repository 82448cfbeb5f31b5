"""Boards as tensors, strings and one-hot arrays."""
from __future__ import annotations


import torch

from ._board import SudokuError, _BOARD, _is_int, _parse


def from_one_hot(x: torch.Tensor) -> torch.Tensor:
    """Digits ``[N, 81]`` int64 from a one-hot (or logit) tensor whose last axis is the digit.

    Example::

        >>> import torch
        >>> from jacobiscope.data import sudoku
        >>> grid = sudoku.to_tensor(["1" + "0" * 80])
        >>> sudoku.from_one_hot(sudoku.to_one_hot(grid))[0, :3].tolist()
        [1, 0, 0]

    Arguments:
        x: ``[N, 9, 9, 9]``, ``[N, 81, 9]``, ``[N, 729]`` (SATNet's flattened bits) or one board
            (``[9, 9, 9]`` / ``[81, 9]``). One-hot or logits, any dtype.

    Returns:
        ``[N, 81]`` int64: ``argmax + 1`` per cell, and 0 where the digit vector is all zero (a blank in the
        SATNet/AKOrN one-hot encoding). For logits, every cell gets its argmax digit.
    """
    if not isinstance(x, torch.Tensor):
        raise SudokuError(f"from_one_hot expects a torch.Tensor, got {type(x).__name__}.")
    if x.ndim >= 1 and x.shape[-1] == 729:
        x = x.reshape(*x.shape[:-1], 81, 9)
    if x.numel() % 729 or x.shape[-1] != 9 or x.ndim < 2:
        raise SudokuError(
            f"from_one_hot expects [N, 9, 9, 9], [N, 81, 9] or [N, 729] (last axis = digit), got shape "
            f"{tuple(x.shape)}."
        )
    if (x.is_floating_point() or x.is_complex()) and not bool(torch.isfinite(x).all()):
        raise SudokuError("from_one_hot got NaN or Inf values, so no digit can be read from them. Check the model "
                          "or file that produced the tensor (a diverged run?).")
    x = x.reshape(-1, 81, 9)
    digits = x.argmax(-1) + 1
    return torch.where((x != 0).any(-1), digits, torch.zeros_like(digits)).long()


def _is_int_board(boards) -> bool:
    """A plain list of 81 ints, or 9 lists of 9: one board, not a batch of boards."""
    if not isinstance(boards, (list, tuple)):
        return False
    if len(boards) == 81:
        return all(_is_int(v) for v in boards)
    return len(boards) == 9 and all(isinstance(row, (list, tuple)) and len(row) == 9
                                    and all(_is_int(v) for v in row) for row in boards)


def to_tensor(boards) -> torch.Tensor:
    """Boards as a ``[N, 81]`` int64 tensor, 0 for blanks.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> sudoku.to_tensor(["." * 80 + "9"])[0, -3:].tolist()
        [0, 0, 9]

    Arguments:
        boards: one 81-character string, a list of them, a list of 81 ints, an int tensor of digits ``[81]``,
            ``[9, 9]``, ``[N, 81]`` or ``[N, 9, 9]``, or a one-hot / logit tensor (via `from_one_hot`):
            any float or bool tensor, and int tensors shaped ``[N, 9, 9, 9]``, ``[N, 81, 9]`` or ``[N, 729]``.
            An int ``[9, 9, 9]`` is read as nine digit grids; pass one-hot boards as float to be safe.

    Returns:
        ``[N, 81]`` int64 (a single board gives ``N = 1``). Values are checked to be 0-9.
    """
    if isinstance(boards, str) or _is_int_board(boards):
        boards = [boards]
    if isinstance(boards, torch.Tensor):
        # Digit grids have at most 3 dims and never end in (81, 9) or 729, so these shapes are one-hot
        # whatever the dtype (SATNet's tensors may be stored as bytes).
        one_hot_shape = boards.ndim >= 4 or tuple(boards.shape[-2:]) == (81, 9) or (
            boards.ndim >= 1 and boards.shape[-1] == 729)
        if boards.is_floating_point() or boards.dtype == torch.bool or one_hot_shape:
            return from_one_hot(boards)
        if boards.is_complex():
            raise SudokuError(f"board tensors hold integer digits 0-9, got dtype {boards.dtype}. Pass the real "
                              "digits as .long() (one-hot boards as float).")
        if boards.numel() % 81 or boards.ndim == 0 or (
                boards.ndim >= 2 and boards.shape[-2:] != (9, 9) and boards.shape[-1] != 81):
            raise SudokuError(
                f"an int board tensor must be [81], [9, 9], [N, 81] or [N, 9, 9], got shape "
                f"{tuple(boards.shape)} ({boards.dtype})."
            )
        out = boards.reshape(-1, 81).long()
        if out.numel() and (out.min() < 0 or out.max() > 9):
            raise SudokuError(
                f"board tensors hold digits 0-9 (0 = blank), got values in [{int(out.min())}, "
                f"{int(out.max())}]. A one-hot tensor must be float or bool (see from_one_hot)."
            )
        return out
    if isinstance(boards, (list, tuple)):
        if boards and all(isinstance(b, str) for b in boards):
            text = []
            for n, board in enumerate(boards):
                board = board.strip()
                if not _BOARD.fullmatch(board):
                    _parse(board, f"board {n}")  # raises the precise message
                text.append(board)
            data = bytearray("".join(text).replace(".", "0"), "ascii")
            return (torch.frombuffer(data, dtype=torch.uint8).long() - 48).reshape(len(text), 81)
        return torch.tensor([_parse(b, f"board {n}") for n, b in enumerate(boards)], dtype=torch.long
                            ).reshape(-1, 81)
    raise SudokuError(
        f"boards must be a string, a list of strings or a tensor, got {type(boards).__name__}."
    )


def to_strings(boards) -> list[str]:
    """Boards as a list of 81-digit strings ('0' = blank).

    Example::

        >>> import torch
        >>> from jacobiscope.data import sudoku
        >>> sudoku.to_strings(torch.zeros(2, 81, dtype=torch.long))[1][:5]
        '00000'

    Arguments:
        boards: anything `to_tensor` accepts.

    Returns:
        One string per board, also for a single board.
    """
    grid = to_tensor(boards)
    return [s.decode("ascii") for s in (grid + 48).to(torch.uint8).numpy().view("S81").reshape(-1)]


def to_one_hot(boards, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One-hot ``[N, 9, 9, 9]`` (row, column, digit), all zero at blanks: the SATNet/AKOrN encoding.

    Example::

        >>> from jacobiscope.data import sudoku
        >>> x = sudoku.to_one_hot(["3" + "0" * 80])
        >>> x.shape, x[0, 0, 0].tolist(), float(x[0, 0, 1].sum())
        (torch.Size([1, 9, 9, 9]), [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.0)

    Arguments:
        boards: anything `to_tensor` accepts.
        dtype: dtype of the result.

    Returns:
        ``[N, 9, 9, 9]`` tensor.
    """
    if not isinstance(dtype, torch.dtype):
        raise SudokuError(f"dtype must be a torch.dtype, got {dtype!r} ({type(dtype).__name__}). Pass e.g. "
                          "dtype=torch.float32.")
    grid = to_tensor(boards)
    hot = torch.nn.functional.one_hot(grid, 10)[..., 1:]  # column 0 (blank) dropped: blanks become all zero
    return hot.reshape(-1, 9, 9, 9).to(dtype)
