"""Two-player PettingZoo board games played in text, through their AEC API.

`BoardGameEnv` drives a `pettingzoo.classic` AEC env (the real engine: its
board, legality mask, win detection and rewards) and speaks the multi-agent
text contract of `envs.multiagent.base`. Subclasses say how the board looks
and how moves are numbered (`tictactoe`, `connect_four`).

Observations show the board as a grid of X / O / ., whose turn it is, and the
legal moves as action texts ("place 5", "drop 3"). An action is the move text
("place 5") or the bare number ("5"), case-insensitive.

Rewards are PettingZoo's: +1 to the winner, -1 to the loser, 0 on a draw and
on every other step.

Illegal moves: an action that is unreadable, off the board, or not legal now
leaves the board unchanged and the same agent moves again, answered by a text
saying what was wrong with the legal moves listed. After `max_illegal_moves`
illegal moves in a row the agent forfeits: it gets -1, the opponent +1, and
the episode ends. So an episode never lasts more than
`max_illegal_moves * cells` steps.

Tasks: `data_idx` picks `data_idx % 4` opening moves (0-3; too few to end
either game), played at random by a generator seeded with the game name and
`data_idx`, so the same id always gives the same position, and about half
the positions have the second player to move. Ids run 0..NUM_TASKS-1;
every 5th id is a test task.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from typing import Any

from envs.common.splits import holdout_split
from envs.multiagent.base import MultiStepResult, check_actions

NUM_TASKS = 1000
TEST_EVERY = 5
MAX_OPENING_MOVES = 3
MARKS = ("X", "O")


def opening_count(data_idx: int) -> int:
    return int(data_idx) % (MAX_OPENING_MOVES + 1)


def num_tasks() -> int:
    return NUM_TASKS


def split_ids(split: str) -> list[int]:
    return holdout_split(split, NUM_TASKS, TEST_EVERY, "a board game")


def category(data_idx: int) -> str:
    n = opening_count(data_idx)
    return f"{n} opening move{'' if n == 1 else 's'}"


class BoardGameEnv(ABC):
    """A PettingZoo classic two-player game behind the multi-agent text contract."""

    name: str = ""  # registry name, e.g. "tictactoe"
    title: str = ""  # shown to the agents, e.g. "Tic-Tac-Toe"
    verb: str = ""  # move verb: "place" / "drop"
    unit: str = ""  # what a move number names: "cell" / "column"
    num_moves: int = 0  # moves are numbered 1..num_moves
    rules: str = ""

    def __init__(self, max_illegal_moves: int = 3):
        if int(max_illegal_moves) < 1:
            raise ValueError("max_illegal_moves must be at least 1")
        self.max_illegal_moves = int(max_illegal_moves)
        self._aec = self._make_aec()
        self.possible_agents: list[str] = list(self._aec.possible_agents)
        self.roles: dict[str, str] = dict(zip(self.possible_agents, MARKS))
        self._move_re = re.compile(rf"(?:{self.verb}\s+)?(\d{{1,4}})", re.IGNORECASE)
        self._started = False
        self._done = False
        self._turn = 0
        self._streak: dict[str, int] = {}
        self._introduced: set[str] = set()
        self.data_idx = -1
        self.openings: list[tuple[str, int]] = []

    # -- what a subclass provides -----------------------------------------

    @abstractmethod
    def _make_aec(self):
        """A new PettingZoo AEC env of the game."""

    @abstractmethod
    def _index(self, number: int) -> int:
        """PettingZoo action index of move `number` (1-based, as the agents see it)."""

    @abstractmethod
    def _number(self, index: int) -> int:
        """The move number the agents see for PettingZoo action `index`."""

    @abstractmethod
    def grid(self) -> list[list[str]]:
        """The board, top row first, as "X" / "O" / "." cells."""

    @abstractmethod
    def _board_text(self) -> str:
        """The board as the agents see it."""

    @abstractmethod
    def _illegal_reason(self, number: int) -> str:
        """Why move `number`, on the board but not legal now, is refused."""

    # -- contract -----------------------------------------------------------

    def reset(self, data_idx: int) -> dict[str, str]:
        self._aec.reset()
        self.data_idx = int(data_idx)
        rng = random.Random(f"{self.name}:{self.data_idx}")
        self.openings = []
        for _ in range(opening_count(self.data_idx)):
            agent = self._aec.agent_selection
            number = rng.choice(self.legal_move_numbers())
            self._aec.step(self._index(number))
            self.openings.append((agent, number))
        self._started, self._done, self._turn = True, False, 0
        self._streak = dict.fromkeys(self.possible_agents, 0)
        self._introduced = set()
        agent = self.current_agent()
        return {agent: self._to_move(agent, "")}

    def agents_to_act(self) -> list[str]:
        return [] if self._done or not self._started else [self.current_agent()]

    def step(self, actions: dict[str, str]) -> MultiStepResult:
        if not self._started:
            raise RuntimeError("call reset(data_idx) before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset(data_idx)")
        agent = self.current_agent()
        check_actions([agent], actions)
        self._turn += 1
        number, error = self._read_move(str(actions[agent]))
        if error:
            return self._illegal(agent, error)
        self._streak[agent] = 0
        self._aec.step(self._index(number))
        rewards = {a: float(self._aec.rewards[a]) for a in self.possible_agents}
        info: dict[str, Any] = {"invalid_action": {agent: False}, "turn": self._turn, "winner": None}
        played = f"{self.verb} {number}"
        if any(self._aec.terminations.values()) or any(self._aec.truncations.values()):
            winner = next((a for a in self.possible_agents if rewards[a] > 0), None)
            return self._finish(rewards, info, winner, forfeit=None, mover=agent, played=played)
        nxt = self.current_agent()
        return MultiStepResult({nxt: self._to_move(nxt, f"{self.roles[agent]} played {played}.\n")}, rewards, False, info)

    def close(self) -> None:
        self._aec.close()
        self._started = False

    # -- game facts (used by opponents and tests) -------------------------

    def current_agent(self) -> str:
        return self._aec.agent_selection

    def opponent(self, agent: str) -> str:
        return next(a for a in self.possible_agents if a != agent)

    def legal_move_numbers(self) -> list[int]:
        mask = self._aec.observe(self.current_agent())["action_mask"]
        return sorted(self._number(i) for i, ok in enumerate(mask) if ok)

    def move_text(self, number: int) -> str:
        return f"{self.verb} {number}"

    def legal_moves(self) -> list[str]:
        return [self.move_text(n) for n in self.legal_move_numbers()]

    def _planes(self):
        """(X plane, O plane) from the first player's AEC observation."""
        obs = self._aec.observe(self.possible_agents[0])["observation"]
        return obs[:, :, 0], obs[:, :, 1]

    # -- texts ----------------------------------------------------------------

    def _read_move(self, text: str) -> tuple[int, str]:
        cleaned = text.strip().rstrip(".").strip()
        match = self._move_re.fullmatch(cleaned)
        if match is None:
            shown = cleaned if len(cleaned) <= 60 else cleaned[:57] + "..."
            return 0, f"could not read {shown!r} as a move; answer with one move such as '{self.legal_moves()[0]}'."
        number = int(match.group(1))
        if not 1 <= number <= self.num_moves:
            return 0, f"there is no {self.unit} {number}: {self.unit}s are numbered 1-{self.num_moves}."
        if number not in self.legal_move_numbers():
            return 0, self._illegal_reason(number)
        return number, ""

    def _state(self, agent: str) -> str:
        return (
            f"Board:\n{self._board_text()}\n"
            f"You are {self.roles[agent]}; it is your turn.\n"
            f"Legal moves: {', '.join(self.legal_moves())}"
        )

    def _intro(self, agent: str) -> str:
        mark, other = self.roles[agent], self.roles[self.opponent(agent)]
        text = f"You are playing {self.title} as {mark}; your opponent plays {other}. {self.rules}\n"
        if self.openings:
            played = ", ".join(f"{self.roles[a]} {self.move_text(n)}" for a, n in self.openings)
            text += f"Opening moves already played: {played}.\n"
        return text

    def _to_move(self, agent: str, prefix: str) -> str:
        """Observation for the agent about to move (with the game intro on its first one)."""
        if agent not in self._introduced:
            self._introduced.add(agent)
            prefix = self._intro(agent) + prefix
        return prefix + self._state(agent)

    def _illegal(self, agent: str, error: str) -> MultiStepResult:
        self._streak[agent] += 1
        rewards = dict.fromkeys(self.possible_agents, 0.0)
        info: dict[str, Any] = {"invalid_action": {agent: True}, "turn": self._turn, "winner": None}
        left = self.max_illegal_moves - self._streak[agent]
        if left > 0:
            warning = f"Illegal move: {error} You may make {left} more illegal move{'' if left == 1 else 's'} in a row before you forfeit.\n"
            return MultiStepResult({agent: self._to_move(agent, warning)}, rewards, False, info)
        winner = self.opponent(agent)
        rewards[agent], rewards[winner] = -1.0, 1.0
        return self._finish(rewards, info, winner, forfeit=agent, mover=agent, played=error)

    def _finish(self, rewards, info, winner, forfeit, mover, played) -> MultiStepResult:
        self._done = True
        outcome = {a: "draw" if winner is None else ("win" if a == winner else "loss") for a in self.possible_agents}
        info.update(winner=winner, outcome=outcome, forfeit=forfeit)
        observations = {}
        for agent in self.possible_agents:
            if forfeit is not None:
                who = "You" if agent == forfeit else self.roles[forfeit]
                head = f"Illegal move: {played} " if agent == forfeit else ""
                head += f"{who} made {self.max_illegal_moves} illegal moves in a row and forfeit{'' if who == 'You' else 's'} the game.\n"
            else:
                who = "You" if agent == mover else self.roles[mover]
                head = f"{who} played {played}.\n"
            result = {"win": "You won.", "loss": "You lost.", "draw": "The game is a draw."}[outcome[agent]]
            observations[agent] = f"{head}Board:\n{self._board_text()}\nGame over: {result}"
        return MultiStepResult(observations, rewards, True, info)
