"""Connect Four (`pettingzoo.classic.connect_four_v3`) in text.

Columns are numbered 1-7 left to right; a piece dropped in a column falls to
its lowest empty row. player_0 plays X and moves first on an empty board;
player_1 plays O. A move is "drop N".
"""

from __future__ import annotations

from pettingzoo.classic import connect_four_v3

from envs.multiagent.board_game import BoardGameEnv

ROWS, COLUMNS = 6, 7


class ConnectFourEnv(BoardGameEnv):
    name = "connect_four"
    title = "Connect Four"
    verb = "drop"
    unit = "column"
    num_moves = COLUMNS
    rules = (
        "Players take turns dropping a piece into one of the 7 columns; it falls to the lowest "
        "empty row. Four pieces in a row, column or diagonal win."
    )

    def _make_aec(self):
        return connect_four_v3.env()

    def _index(self, number: int) -> int:
        return number - 1

    def _number(self, index: int) -> int:
        return index + 1

    def grid(self) -> list[list[str]]:
        # The AEC observation is the board as seen: row 0 on top.
        x, o = self._planes()
        return [["X" if x[r][c] else "O" if o[r][c] else "." for c in range(COLUMNS)] for r in range(ROWS)]

    def _board_text(self) -> str:
        header = " ".join(str(c + 1) for c in range(COLUMNS))
        return header + "\n" + "\n".join(" ".join(row) for row in self.grid())

    def _illegal_reason(self, number: int) -> str:
        return f"column {number} is full."
