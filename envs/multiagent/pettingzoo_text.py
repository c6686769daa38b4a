"""Any PettingZoo environment, AEC or Parallel, behind the multi-agent text contract.

`pettingzoo_text_env(env)` wraps a PettingZoo env object (`AECTextEnv` for an
`AECEnv`, `ParallelTextEnv` for a `ParallelEnv`) so that it speaks the
contract of `envs.multiagent.base`: text observations, text actions, rewards
for every agent every step, one `done` for everyone. The PettingZoo env stays
the engine: its dynamics, action masks, rewards, terminations and
truncations are used as they are.

What the wrapper needs to know about a game:

* `render(observation, agent, env) -> str`: the agent's raw PettingZoo
  observation as text (`env` is the PettingZoo env, for state the
  observation lacks). A few games have one built in (`GAME_PRESETS`:
  rps_v2, tictactoe_v3, connect_four_v3); anything else falls back to
  `describe_observation`, a generic dump of arrays and numbers. Give your
  own for a readable game.
* `action_names`: a move name per action index of the agent's `Discrete`
  action space (a list, {agent: list}, or a function (agent, index) -> str);
  by default the index itself ("0", "1", ...). An action text is a move
  name, case-insensitive, a trailing period allowed.

Legal moves come from the action mask (the observation's "action_mask", else
the agent's info "action_mask", else every action is legal) and are listed
at the end of every observation. An action that cannot be read or is not
legal is refused with a text that says why and lists the legal moves; the
world does not change (contract: the agent used up that turn):

* AEC (turn-based): the same agent acts again.
* Parallel (simultaneous): no action of that step is played (a parallel env
  steps all agents at once), every agent acts again; the refused agents are
  told why, the others that their step was replayed.

After `max_illegal_moves` refused actions in a row an agent forfeits: the
episode ends, it gets `forfeit_reward` (-1) and every other agent
`opponent_forfeit_reward` (+1; use 0 for cooperative games). So an episode
lasts at most `max_illegal_moves` times the env's own length.

Observations say what the other agents did since the agent's last
observation (and its reward, when non-zero), then the rendered observation,
then the legal moves; an agent's first one starts with who it is.

When done, `info["outcome"]` ranks the agents by return (the highest
return(s) win unless every agent has it: a draw; a forfeit: the forfeiting
agents lose, the rest win) and `info["winner"]` is the single winner or None.

Tasks: `data_idx` is the seed of the PettingZoo env's `reset`. Ids run
0..NUM_TASKS-1; every 5th is a test task (`split_ids`, as the board games).

`make_pettingzoo_env(factory=..., ...)` builds one from names (what YAML and
the registry name "pettingzoo" give): ``factory: "pettingzoo.classic.rps_v2:
parallel_env"``, ``env_kwargs``, and ``render`` / ``action_names`` as
"module:attr" strings or values.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.common.splits import holdout_split
from envs.multiagent.base import MultiStepResult, check_actions

NUM_TASKS = 1000
TEST_EVERY = 5

Render = Callable[[Any, str, Any], str]  # (observation, agent, PettingZoo env) -> text
ActionNames = Sequence[str] | Mapping[str, Sequence[str]] | Callable[[str, int], str]


def num_tasks() -> int:
    return NUM_TASKS


def split_ids(split: str) -> list[int]:
    return holdout_split(split, NUM_TASKS, TEST_EVERY, "a PettingZoo env")


def category(data_idx: int) -> str:
    return "all"


# ---- rendering ------------------------------------------------------------------------------


def describe_observation(observation: Any) -> str:
    """A generic text of a PettingZoo observation: arrays in full, dicts key by key
    (the action mask left out: the legal moves are listed anyway)."""
    if isinstance(observation, Mapping):
        if set(observation) <= {"observation", "action_mask"}:
            return describe_observation(observation.get("observation"))
        return "\n".join(f"{k}: {describe_observation(v)}" for k, v in observation.items() if k != "action_mask")
    if isinstance(observation, np.ndarray) and observation.ndim > 0:
        shown = observation.astype(int) if observation.dtype == bool else observation  # 0/1, not False/True
        return np.array2string(shown, threshold=100_000, max_line_width=120)
    if isinstance(observation, (np.ndarray, np.generic)):
        return str(observation.item())
    return str(observation)


def default_render(observation: Any, agent: str, env: Any) -> str:
    return f"Observation:\n{describe_observation(observation)}"


_RPS_MOVES = ("rock", "paper", "scissors", "lizard", "spock")


def _render_rps(observation: Any, agent: str, env: Any) -> str:
    last = int(np.asarray(observation).item())
    seen = _RPS_MOVES[last] if last < len(_RPS_MOVES) and last < env.action_space(agent).n else None
    return f"Your opponent's last move: {seen or 'none yet'}."


def _marks(agent: str, env: Any) -> tuple[str, str]:
    """(own mark, opponent mark): the first agent plays X. Classic observations are
    planes from the observing agent's view (plane 0: its own pieces)."""
    return ("X", "O") if agent == env.possible_agents[0] else ("O", "X")


def _render_tictactoe(observation: Any, agent: str, env: Any) -> str:
    planes = observation["observation"]
    mine, theirs = _marks(agent, env)
    # planes[i][j] is PettingZoo's flat index 3i + j: row j, column i.
    rows = [" ".join(mine if planes[c][r][0] else theirs if planes[c][r][1] else "." for c in range(3)) for r in range(3)]
    return f"You play {mine}. Cells are numbered 1-9 left to right, top to bottom.\nBoard:\n" + "\n".join(rows)


def _tictactoe_move(agent: str, index: int) -> str:
    col, row = divmod(index, 3)
    return f"place {row * 3 + col + 1}"


def _render_connect_four(observation: Any, agent: str, env: Any) -> str:
    planes = observation["observation"]
    mine, theirs = _marks(agent, env)
    rows, cols = planes.shape[:2]
    grid = [" ".join(mine if planes[r][c][0] else theirs if planes[r][c][1] else "." for c in range(cols)) for r in range(rows)]
    return f"You play {mine}.\nBoard:\n" + " ".join(str(c + 1) for c in range(cols)) + "\n" + "\n".join(grid)


@dataclass(frozen=True)
class GamePreset:
    """A readable default for a known game (keyed by the env's metadata["name"])."""

    render: Render
    action_names: ActionNames
    description: str = ""


GAME_PRESETS: dict[str, GamePreset] = {
    "rps_v2": GamePreset(_render_rps, list(_RPS_MOVES),
                         "Rock paper scissors: rock beats scissors, scissors beats paper, paper beats rock "
                         "(with five moves also lizard and spock). Both players move at the same time."),
    "tictactoe_v3": GamePreset(_render_tictactoe, _tictactoe_move,
                               "Tic-Tac-Toe: three of your marks in a row, column or diagonal win."),
    "connect_four_v3": GamePreset(_render_connect_four, lambda agent, index: f"drop {index + 1}",
                                  "Connect Four: a piece dropped in a column falls to its lowest empty row; "
                                  "four of yours in a row, column or diagonal win."),
}


# ---- the wrappers ---------------------------------------------------------------------------


class PettingZooTextEnv:
    """What the AEC and Parallel wrappers share: names, masks, texts, endings."""

    simultaneous = False

    def __init__(self, env: Any, *, render: Render | None = None, action_names: ActionNames | None = None,
                 roles: Mapping[str, str] | None = None, title: str | None = None, description: str | None = None,
                 max_illegal_moves: int = 3, forfeit_reward: float = -1.0, opponent_forfeit_reward: float = 1.0):
        if int(max_illegal_moves) < 1:
            raise ValueError("max_illegal_moves must be at least 1")
        self.env = env
        self.name = str(getattr(env, "metadata", {}).get("name", "") or type(env).__name__)
        preset = GAME_PRESETS.get(self.name)
        self.render = render or (preset.render if preset else default_render)
        self.title = title or self.name
        self.max_illegal_moves = int(max_illegal_moves)
        self.forfeit_reward, self.opponent_forfeit_reward = float(forfeit_reward), float(opponent_forfeit_reward)
        self.possible_agents: list[str] = [str(a) for a in env.possible_agents]
        self.roles: dict[str, str] = {a: str((roles or {}).get(a, a)) for a in self.possible_agents}
        names = action_names if action_names is not None else (preset.action_names if preset else None)
        self._names = {a: self._move_names(a, names) for a in self.possible_agents}
        self._lookup = {a: {n.lower(): i for i, n in enumerate(self._names[a])} for a in self.possible_agents}
        self.description = description or (preset.description if preset and preset.description else "")
        self.description = self._full_description(self.description)
        self._started = self._done = False

    # -- setup ---------------------------------------------------------------------------

    def _move_names(self, agent: str, names: ActionNames | None) -> list[str]:
        space = self.env.action_space(agent)
        n = getattr(space, "n", None)
        if n is None or getattr(space, "shape", ()) != ():
            raise ValueError(f"{self.name}: agent {agent!r} has action space {space}; text moves need a Discrete one")
        if names is None:
            out = [str(i) for i in range(int(n))]
        elif callable(names):
            out = [str(names(agent, i)) for i in range(int(n))]
        else:
            listed = names[agent] if isinstance(names, Mapping) else names
            out = [str(x) for x in listed][: int(n)]
            if len(out) < int(n):
                raise ValueError(f"{self.name}: {len(out)} action names for agent {agent!r}, whose action space has {n}")
        if len({x.strip().lower() for x in out}) != len(out):
            raise ValueError(f"{self.name}: action names of {agent!r} are not distinct (case-insensitive): {out}")
        return [x.strip() for x in out]

    def _full_description(self, rules: str) -> str:
        how = ("All agents act at the same time; when any move is refused, no move of that step is played."
               if self.simultaneous else "Agents take turns.")
        return (f"You are an agent in {self.title} (a PettingZoo environment) with {len(self.possible_agents) - 1} "
                f"other agent(s). {rules + ' ' if rules else ''}{how} Each turn you see what the others did, your "
                f"observation and your legal moves; answer with exactly one legal move, written as listed. A move "
                f"that cannot be read or is not legal is refused and you act again; after {self.max_illegal_moves} "
                f"refused moves in a row you forfeit.")

    # -- moves ---------------------------------------------------------------------------

    def legal_actions(self, agent: str) -> list[int]:
        """Action indices legal for `agent` now (from the action mask; all without one)."""
        mask = None
        observation = self._raw_observation(agent)
        if isinstance(observation, Mapping) and "action_mask" in observation:
            mask = observation["action_mask"]
        elif isinstance(self._raw_info(agent), Mapping) and "action_mask" in self._raw_info(agent):
            mask = self._raw_info(agent)["action_mask"]
        if mask is None:
            return list(range(len(self._names[agent])))
        return [i for i, ok in enumerate(np.asarray(mask).tolist()) if ok]

    def legal_moves(self, agent: str) -> list[str]:
        return [self._names[agent][i] for i in self.legal_actions(agent)]

    def move_name(self, agent: str, index: int) -> str:
        return self._names[agent][index]

    def _read(self, agent: str, text: str) -> tuple[int, str]:
        """(action index, "") or (-1, why it is refused)."""
        cleaned = str(text).strip().rstrip(".").strip()
        index = self._lookup[agent].get(cleaned.lower())
        legal = self.legal_moves(agent)
        if index is None:
            shown = cleaned if len(cleaned) <= 60 else cleaned[:57] + "..."
            return -1, f"could not read {shown!r} as a move; answer with one legal move such as '{legal[0]}'."
        if index not in self.legal_actions(agent):
            return -1, f"{self._names[agent][index]!r} is not legal now."
        return index, ""

    # -- texts ---------------------------------------------------------------------------

    def _state(self, agent: str) -> str:
        return f"{self.render(self._raw_observation(agent), agent, self.env)}\nLegal moves: {', '.join(self.legal_moves(agent))}"

    def _news(self, agent: str) -> str:
        """What the others did since `agent`'s last observation, and its reward meanwhile."""
        lines = [f"{self.roles[a]} played {move}." for a, move in self._log[self._seen[agent]:] if a != agent]
        self._seen[agent] = len(self._log)
        if self._unseen_reward[agent]:
            lines.append(f"Your reward: {self._unseen_reward[agent]:+g}.")
            self._unseen_reward[agent] = 0.0
        intro = ""
        if agent not in self._introduced:
            self._introduced.add(agent)
            intro = f"You are {self.roles[agent]} in {self.title}.\n"
        return intro + "".join(line + "\n" for line in lines)

    def _to_act(self, agent: str, warning: str = "") -> str:
        return self._news(agent) + warning + self._state(agent)

    # -- episode bookkeeping -------------------------------------------------------------

    def _begin(self) -> None:
        self._started, self._done, self._turn = True, False, 0
        self._streak = dict.fromkeys(self.possible_agents, 0)
        self._returns = dict.fromkeys(self.possible_agents, 0.0)
        self._unseen_reward = dict.fromkeys(self.possible_agents, 0.0)
        self._log: list[tuple[str, str]] = []
        self._seen = dict.fromkeys(self.possible_agents, 0)
        self._introduced: set[str] = set()

    def _check_step(self) -> None:
        if not self._started:
            raise RuntimeError("call reset(data_idx) before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset(data_idx)")

    def _add_rewards(self, into: dict[str, float], rewards: Mapping[str, Any]) -> None:
        for agent, reward in rewards.items():
            if agent in into:
                into[agent] += float(reward)
                self._returns[agent] += float(reward)
                self._unseen_reward[agent] += float(reward)

    def _refused(self, errors: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """(agents that now forfeit, warning text per refused agent)."""
        forfeit, warnings = [], {}
        for agent, error in errors.items():
            self._streak[agent] += 1
            left = self.max_illegal_moves - self._streak[agent]
            if left <= 0:
                forfeit.append(agent)
            warnings[agent] = (f"Illegal move: {error} You may make {left} more illegal move{'' if left == 1 else 's'} "
                               f"in a row before you forfeit.\n")
        return forfeit, warnings

    def _forfeit(self, forfeit: list[str], errors: Mapping[str, str], rewards: dict[str, float], info: dict) -> MultiStepResult:
        for agent in self.possible_agents:
            bonus = self.forfeit_reward if agent in forfeit else self.opponent_forfeit_reward
            self._add_rewards(rewards, {agent: bonus})
        outcome = {a: "loss" if a in forfeit else "win" for a in self.possible_agents}
        heads = {}
        for agent in self.possible_agents:
            who = ", ".join("You" if a == agent else self.roles[a] for a in forfeit)
            heads[agent] = (f"Illegal move: {errors[agent]} " if agent in forfeit else "") + (
                f"{who} made {self.max_illegal_moves} illegal moves in a row and forfeit.\n")
        return self._finish(rewards, info, outcome, forfeit[0] if len(forfeit) == 1 else forfeit, heads)

    def _finish(self, rewards: dict[str, float], info: dict, outcome: dict[str, str] | None = None,
                forfeit: Any = None, heads: Mapping[str, str] | None = None) -> MultiStepResult:
        self._done = True
        outcome = outcome or outcome_by_returns(self._returns)
        winners = [a for a, o in outcome.items() if o == "win"]
        info.update(outcome=outcome, winner=winners[0] if len(winners) == 1 else None, forfeit=forfeit)
        result = {"win": "You won.", "loss": "You lost.", "draw": "It is a draw."}
        observations = {}
        for agent in self.possible_agents:
            text = self._news(agent) + (heads or {}).get(agent, "")
            text += self.render(self._raw_observation(agent), agent, self.env)
            observations[agent] = f"{text}\nEpisode over: {result[outcome[agent]]} Your return: {self._returns[agent]:g}."
        return MultiStepResult(observations, rewards, True, info)

    # -- what each API provides ----------------------------------------------------------

    def _raw_observation(self, agent: str) -> Any:
        raise NotImplementedError

    def _raw_info(self, agent: str) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        self.env.close()
        self._started = False


def outcome_by_returns(returns: Mapping[str, float]) -> dict[str, str]:
    """The agents with the highest return win, the rest lose; everyone equal: a draw."""
    best = max(returns.values())
    if all(r == best for r in returns.values()):
        return dict.fromkeys(returns, "draw")
    return {a: "win" if r == best else "loss" for a, r in returns.items()}


class AECTextEnv(PettingZooTextEnv):
    """A PettingZoo `AECEnv` (turn-based): one agent acts per step."""

    def reset(self, data_idx: int) -> dict[str, str]:
        self.env.reset(seed=int(data_idx))
        self._begin()
        self._skip_dead({})
        agent = self.env.agent_selection
        return {agent: self._to_act(agent)}

    def agents_to_act(self) -> list[str]:
        return [] if self._done or not self._started else [self.env.agent_selection]

    def step(self, actions: dict[str, str]) -> MultiStepResult:
        self._check_step()
        agent = self.env.agent_selection
        check_actions([agent], actions)
        self._turn += 1
        rewards = dict.fromkeys(self.possible_agents, 0.0)
        info: dict[str, Any] = {"invalid_action": {agent: False}, "turn": self._turn, "winner": None}
        index, error = self._read(agent, actions[agent])
        if error:
            info["invalid_action"][agent] = True
            forfeit, warnings = self._refused({agent: error})
            if forfeit:
                return self._forfeit(forfeit, {agent: error}, rewards, info)
            return MultiStepResult({agent: self._to_act(agent, warnings[agent])}, rewards, False, info)
        self._streak[agent] = 0
        self._log.append((agent, self.move_name(agent, index)))
        self.env.step(index)
        self._add_rewards(rewards, self.env.rewards)
        self._skip_dead(rewards)
        if self._over():
            return self._finish(rewards, info)
        nxt = self.env.agent_selection
        return MultiStepResult({nxt: self._to_act(nxt)}, rewards, False, info)

    def _over(self) -> bool:
        env = self.env
        return not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)

    def _skip_dead(self, rewards: dict[str, float]) -> None:
        """Step finished agents out with None (PettingZoo's rule) while others still play."""
        env = self.env
        while not self._over() and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            env.step(None)
            self._add_rewards(rewards, env.rewards)

    def _raw_observation(self, agent: str) -> Any:
        return self.env.observe(agent)

    def _raw_info(self, agent: str) -> Any:
        return self.env.infos.get(agent, {})


class ParallelTextEnv(PettingZooTextEnv):
    """A PettingZoo `ParallelEnv` (simultaneous): every live agent acts every step."""

    simultaneous = True

    def reset(self, data_idx: int) -> dict[str, str]:
        self._observations, self._infos = self.env.reset(seed=int(data_idx))
        self._observations, self._infos = dict(self._observations), dict(self._infos)
        self._begin()
        return {agent: self._to_act(agent) for agent in self.env.agents}

    def agents_to_act(self) -> list[str]:
        return [] if self._done or not self._started else list(self.env.agents)

    def step(self, actions: dict[str, str]) -> MultiStepResult:
        self._check_step()
        acting = list(self.env.agents)
        check_actions(acting, actions)
        self._turn += 1
        rewards = dict.fromkeys(self.possible_agents, 0.0)
        read = {agent: self._read(agent, actions[agent]) for agent in acting}
        errors = {agent: error for agent, (_, error) in read.items() if error}
        info: dict[str, Any] = {"invalid_action": {a: a in errors for a in acting}, "turn": self._turn, "winner": None}
        if errors:
            forfeit, warnings = self._refused(errors)
            if forfeit:
                return self._forfeit(forfeit, errors, rewards, info)
            refused = ", ".join(self.roles[a] for a in errors)
            replay = f"No move of the last step was played ({refused}: refused); act again.\n"
            return MultiStepResult({a: self._to_act(a, warnings.get(a, replay)) for a in acting}, rewards, False, info)
        for agent in acting:
            self._streak[agent] = 0
            self._log.append((agent, self.move_name(agent, read[agent][0])))
        observations, step_rewards, terminations, truncations, infos = self.env.step({a: read[a][0] for a in acting})
        self._observations.update(observations)
        self._infos.update(infos)
        self._add_rewards(rewards, step_rewards)
        if not self.env.agents or all(terminations.get(a) or truncations.get(a) for a in self.env.agents):
            return self._finish(rewards, info)
        return MultiStepResult({a: self._to_act(a) for a in self.env.agents}, rewards, False, info)

    def _raw_observation(self, agent: str) -> Any:
        return self._observations.get(agent)

    def _raw_info(self, agent: str) -> Any:
        return self._infos.get(agent, {})


class RandomLegalPlayer:
    """A fixed player for any wrapped env: a uniformly random legal move (seeded)."""

    def __init__(self, env: PettingZooTextEnv, agent: str, seed: int = 0):
        self.env, self.agent = env, agent
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str) -> tuple[str, str]:
        moves = self.env.legal_moves(self.agent)
        return "I play a random legal move.", moves[int(self.rng.integers(len(moves)))]


def pettingzoo_text_env(env: Any, **options: Any) -> PettingZooTextEnv:
    """The text-contract wrapper of a PettingZoo env object, chosen by its API."""
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, AECEnv):
        return AECTextEnv(env, **options)
    if isinstance(env, ParallelEnv):
        return ParallelTextEnv(env, **options)
    raise TypeError(f"{type(env).__name__} is neither a PettingZoo AECEnv nor a ParallelEnv")


def import_object(path: str) -> Any:
    """"package.module:attr" -> the object."""
    module, sep, attr = str(path).partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected 'package.module:attribute', got {path!r}")
    return getattr(importlib.import_module(module), attr)


def make_pettingzoo_env(factory: str | Callable[..., Any] = "", env_kwargs: Mapping[str, Any] | None = None,
                        render: str | Render | None = None, action_names: str | ActionNames | None = None,
                        **options: Any) -> PettingZooTextEnv:
    """A wrapped PettingZoo env from names (the registry's "pettingzoo" env; YAML's env_options).

    `factory`: "module:function" returning an AEC or Parallel env, e.g.
    "pettingzoo.classic.rps_v2:parallel_env", called with `env_kwargs`;
    `render` / `action_names`: objects or "module:attr" names of them; the rest
    (roles, title, description, max_illegal_moves, forfeit rewards) go to the wrapper."""
    if not factory:
        raise ValueError("the pettingzoo env needs env_options.factory, e.g. 'pettingzoo.classic.rps_v2:parallel_env'")
    make = import_object(factory) if isinstance(factory, str) else factory
    if isinstance(render, str):
        render = import_object(render)
    if isinstance(action_names, str):
        action_names = import_object(action_names)
    return pettingzoo_text_env(make(**dict(env_kwargs or {})), render=render, action_names=action_names, **options)
