"""Tic-Tac-Toe (`pettingzoo.classic.tictactoe_v3`) in text.

Cells are numbered 1-9 left to right, top to bottom (PettingZoo numbers them
column by column, 0-8; the mapping lives here). player_1 plays X and moves
first on an empty board; player_2 plays O. A move is "place N".
"""

from __future__ import annotations

from pettingzoo.classic import tictactoe_v3

from envs.multiagent.board_game import BoardGameEnv

_KEY = "1 2 3\n4 5 6\n7 8 9"


class TicTacToeEnv(BoardGameEnv):
    name = "tictactoe"
    title = "Tic-Tac-Toe"
    verb = "place"
    unit = "cell"
    num_moves = 9
    rules = (
        "Players take turns placing their mark in an empty cell; three marks in a row, "
        f"column or diagonal win. Cells are numbered left to right, top to bottom:\n{_KEY}"
    )

    def _make_aec(self):
        return tictactoe_v3.env()

    # PettingZoo's flat index k is row k % 3, column k // 3.
    def _index(self, number: int) -> int:
        row, col = divmod(number - 1, 3)
        return col * 3 + row

    def _number(self, index: int) -> int:
        col, row = divmod(index, 3)
        return row * 3 + col + 1

    def grid(self) -> list[list[str]]:
        # The AEC observation is the flat board reshaped row-major: plane[i][j]
        # is index 3i + j, i.e. row j, column i: the transpose of the picture.
        x, o = self._planes()
        return [["X" if x[c][r] else "O" if o[c][r] else "." for c in range(3)] for r in range(3)]

    def _board_text(self) -> str:
        return "\n".join(" ".join(row) for row in self.grid())

    def _illegal_reason(self, number: int) -> str:
        return f"cell {number} is already taken."
