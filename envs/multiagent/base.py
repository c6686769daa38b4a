"""The contract every multi-agent text environment implements, server side.

One env session plays one episode at a time among a fixed set of agents
(`possible_agents`, e.g. ``["player_1", "player_2"]``). Every observation and
every action is text:

    env.reset(data_idx)  -> {agent: observation} for the agents that act first
    env.agents_to_act()  -> the agents whose actions the next step() needs
    env.step({agent: action, ...}) -> MultiStepResult(observations, rewards, done, info)
    env.possible_agents  -> every agent id, in a fixed order
    env.roles            -> {agent: role name}; a policy mapping may key on roles
    env.close()          -> frees the engine (idempotent)

Both styles of play fit this one shape:

* turn-based (AEC, e.g. Tic-Tac-Toe): `agents_to_act()` holds one agent and
  step() takes that agent's action only;
* simultaneous (e.g. CoopCraft): `agents_to_act()` holds every agent and
  step() takes all their actions at once.

step() must be given an action for exactly the agents in `agents_to_act()`;
anything else is a caller bug and raises ValueError (stepping a finished
episode, or before reset(), raises RuntimeError).

What step() returns:

* `observations`: a text for every agent that must act next (the keys of the
  next step's actions). When the episode ends (`done`), it holds a final text
  for *every* agent saying how the episode ended, and `agents_to_act()` is [].
* `rewards`: a float for every agent in `possible_agents`, every step (0.0
  where nothing happened to that agent), so no reward is ever lost between an
  agent's turns.
* `done`: the episode is over for everyone (a game won, drawn or forfeited, a
  cooperative goal reached, a turn limit hit). There is no per-agent done.
* `info`: always ``info["invalid_action"]: {agent: bool}`` for the agents that
  acted this step and ``info["turn"]``: the number of steps taken so far. Games
  add ``info["winner"]`` (agent id, or None while running or on a draw); when
  done ``info["outcome"]`` ({agent: "win" | "loss" | "draw"}) and
  ``info["forfeit"]`` (the agent that forfeited, or None). Cooperative envs
  add ``info["success"]`` (bool, the shared goal reached).

Invalid actions are not exceptions. An action that cannot be parsed or is not
legal now gets a text that says what was wrong and lists the legal moves (or
the valid action forms); the world does not change and the agent has used up
that turn (info["invalid_action"][agent] is True). Each env documents how
this keeps episodes finite: the board games make the same agent move again
and after `max_illegal_moves` illegal moves in a row it forfeits (loses, the
opponent wins); CoopCraft has a turn limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class MultiStepResult:
    observations: dict[str, str]
    rewards: dict[str, float]
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class MultiAgentTextEnv(Protocol):
    possible_agents: list[str]
    roles: dict[str, str]

    def reset(self, data_idx: int) -> dict[str, str]: ...

    def agents_to_act(self) -> list[str]: ...

    def step(self, actions: dict[str, str]) -> MultiStepResult: ...

    def close(self) -> None: ...


def check_actions(expected: list[str], actions: dict[str, str]) -> None:
    """Raise ValueError unless `actions` names exactly the `expected` agents."""
    if set(actions) != set(expected):
        raise ValueError(f"step() needs actions for exactly {sorted(expected)}, got {sorted(actions)}")
