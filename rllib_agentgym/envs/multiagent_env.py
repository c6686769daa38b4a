"""RLlib `MultiAgentEnv` view of a multi-agent text env (`envs.multiagent`).

`TextMultiAgentEnv` wraps any env that follows the contract of
`envs.multiagent.base` (turn-based or simultaneous): every agent has a
gymnasium `Text` observation and action space; reset() returns observations
(and infos) for the agents that act first; step() takes the model's text for
exactly those agents and returns observations for the agents that act next,
rewards for every agent, ``terminateds = {"__all__": done}`` (plus every
agent when done) and ``truncateds = {"__all__": False}``: the env's own
limits (a game's end, CoopCraft's turn limit) are terminal; the runner's
interaction horizon is the runner's to apply. When the episode ends every
agent gets a final observation, as RLlib's multi-agent episode expects.

The action text is the model's full reply: with ``react_format`` (default)
the env gets the line after "Action:" (the text itself, stripped, when there
is none; infos then say ``well_formed: False``).

env_config keys:

    env:          "tictactoe" | "connect_four" | "coop_craft" | "pettingzoo" (or "agentgym/<name>")
    env_options:  keyword options of the env class (e.g. {"max_turns": 8}); for "pettingzoo"
                  the PettingZoo env to wrap: {"factory": "pettingzoo.classic.rps_v2:parallel_env",
                  "env_kwargs": {...}, "render": "module:fn", "action_names": [...], ...}
                  (`envs.multiagent.pettingzoo_text`)
    split:        task split to draw data_idx from when reset() is given none ("train")
    task_ids:     explicit list of data_idx to draw from instead of a split
    react_format: pull the action out of "Thought: ... Action: ..." (True)

`register_multiagent_envs()` registers ``agentgym/tictactoe``,
``agentgym/connect_four``, ``agentgym/coop_craft`` and ``agentgym/pettingzoo``
with Ray Tune.

Who uses this class: RLlib users (the env checker, RLlib's own multi-agent
algorithms and episodes, custom loops). GRPO training does not step it:
`MultiAgentLLMEnvRunner` drives the same contract env directly, built by the
same `make_text_env` with the same `instruction_for`, because it keeps
token-level trajectories (the exact sampled ids, chat-template ids of each
observation, loss masks) and batches one generation call per policy across
all episodes' acting agents, which RLlib's text-in / text-out episodes can
neither carry nor batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envs.multiagent.base import MultiAgentTextEnv
from envs.multiagent.registry import MULTIAGENT_ENVS, make_env, split_ids
from rllib_agentgym.envs.gym_env import text_space
from rllib_agentgym.envs.registry import ENV_PREFIX, family_name
from rllib_agentgym.envs.spec import parse_react_action

_ANSWER_FORMAT = """Answer every turn in this format, with a short thought:
Thought: your reasoning
Action: {example}"""

INSTRUCTIONS: dict[str, str] = {
    "tictactoe": (
        "You are playing Tic-Tac-Toe against another player. Each turn you see the board (X, O, and . for an "
        "empty cell; cells are numbered 1-9 left to right, top to bottom) and your legal moves. Three of your "
        "marks in a row, column or diagonal win. Choose one legal move, written as \"place N\". An illegal move "
        "is refused and you must move again; too many illegal moves in a row lose the game.\n\n"
        + _ANSWER_FORMAT.format(example="place N")
    ),
    "connect_four": (
        "You are playing Connect Four against another player. Each turn you see the board (X, O, and . for an "
        "empty cell; columns are numbered 1-7) and your legal moves. A piece dropped in a column falls to its "
        "lowest empty row; four of your pieces in a row, column or diagonal win. Choose one legal move, written "
        "as \"drop N\". An illegal move is refused and you must move again; too many illegal moves in a row lose "
        "the game.\n\n" + _ANSWER_FORMAT.format(example="drop N")
    ),
    "coop_craft": (
        "You and a partner must craft one goal item together. Each of you sees only your own inventory and "
        "knows only some of the recipes, so tell each other what you need. Both of you act every turn; "
        "messages and items you send arrive at the end of the turn.\n"
        "Actions (exactly one per turn):\n"
        "- say <message>: send your partner a message, e.g. \"say please give me 2 fiber\".\n"
        "- give <n> <item>: hand your partner items, e.g. \"give 1 wax\".\n"
        "- craft <item>: craft one item from its recipe's ingredients in your inventory.\n"
        "- wait: do nothing this turn.\n"
        "The task succeeds, for both of you, as soon as either of you holds the goal item.\n\n"
        + _ANSWER_FORMAT.format(example="the single action to take")
    ),
}


def make_text_env(env_name: str, env_options: Mapping[str, Any] | None = None) -> MultiAgentTextEnv:
    """The contract env of `env_name` ("agentgym/<name>" or "<name>") with its env_options:
    the one construction this wrapper and `MultiAgentLLMEnvRunner` share."""
    return make_env(family_name(str(env_name)), **dict(env_options or {}))


def instruction_for(env_name: str, env: MultiAgentTextEnv | None = None) -> str:
    """The system instruction of an env: ours for the named envs; for a wrapped PettingZoo
    env its own description (the game, the legal-move rule) plus the answer format."""
    name = family_name(str(env_name))
    if name in INSTRUCTIONS:
        return INSTRUCTIONS[name]
    description = getattr(env, "description", "")
    return f"{description}\n\n{_ANSWER_FORMAT.format(example='one of your legal moves')}" if description else ""


class TextMultiAgentEnv(MultiAgentEnv):
    """A multi-agent text env as an RLlib `MultiAgentEnv` (see module doc for env_config)."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, env: MultiAgentTextEnv | None = None):
        super().__init__()
        config = dict(config or {})
        self.env_name = family_name(str(config.get("env", "")))
        if env is None:
            env = make_text_env(self.env_name, config.get("env_options"))
        self.env = env
        task_ids = config.get("task_ids")
        if task_ids is None:
            task_ids = split_ids(self.env_name, config.get("split", "train"))
        self.task_ids = [int(i) for i in task_ids]
        if not self.task_ids:
            raise ValueError("no task ids to draw from")
        self.react_format = bool(config.get("react_format", True))
        self.instruction = instruction_for(self.env_name, env)
        self.possible_agents = list(env.possible_agents)
        self.agents = list(self.possible_agents)
        self.roles = dict(env.roles)
        self.observation_spaces = {a: text_space() for a in self.possible_agents}
        self.action_spaces = {a: text_space() for a in self.possible_agents}
        self.data_idx: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        data_idx = (options or {}).get("data_idx")
        if data_idx is None:
            data_idx = int(self.np_random.choice(self.task_ids))
        self.data_idx = int(data_idx)
        observations = self.env.reset(self.data_idx)
        self.agents = list(self.possible_agents)
        infos = {
            agent: {"data_idx": self.data_idx, "role": self.roles[agent], "instruction": self.instruction}
            for agent in observations
        }
        return observations, infos

    def step(self, action_dict: Mapping[str, str]):
        actions, well_formed = {}, {}
        for agent, text in action_dict.items():
            actions[agent], well_formed[agent] = self._action(str(text))
        result = self.env.step(actions)
        shared = {k: v for k, v in result.info.items() if k != "invalid_action"}
        infos = {}
        for agent in result.observations:
            infos[agent] = {**shared, "data_idx": self.data_idx, "role": self.roles[agent]}
            if agent in actions:
                infos[agent].update(invalid_action=bool(result.info["invalid_action"][agent]), well_formed=well_formed[agent])
        rewards = {agent: float(result.rewards.get(agent, 0.0)) for agent in self.possible_agents}
        terminateds = {"__all__": bool(result.done)}
        if result.done:
            terminateds.update(dict.fromkeys(self.possible_agents, True))
            self.agents = []
        return dict(result.observations), rewards, terminateds, {"__all__": False}, infos

    def agents_to_act(self) -> list[str]:
        return self.env.agents_to_act()

    def close(self) -> None:
        self.env.close()

    def _action(self, text: str) -> tuple[str, bool]:
        if not self.react_format:
            return text.strip(), True
        action = parse_react_action(text)
        return (text.strip(), False) if action is None else (action, True)


def env_creator(name: str) -> Callable[[Mapping[str, Any]], TextMultiAgentEnv]:
    def _create(env_config: Mapping[str, Any]) -> TextMultiAgentEnv:
        return TextMultiAgentEnv({**dict(env_config or {}), "env": name})

    return _create


def register_multiagent_envs() -> None:
    """Register ``agentgym/<name>`` for every multi-agent env with Ray Tune."""
    from ray.tune.registry import register_env

    for name in MULTIAGENT_ENVS:
        register_env(ENV_PREFIX + name, env_creator(name))
