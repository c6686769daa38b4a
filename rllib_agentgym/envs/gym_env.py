"""A gymnasium view of one env session: text in, text out.

For users who want a plain `gymnasium.Env` (scripts, evaluation of hand-written
agents). The LLM env runner does not step these one by one: it batches many
sessions per generation call. Observation and action spaces are
`gymnasium.spaces.Text`; the action is the model's full text, from which the
family's parser pulls the action (as the runner does).
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym

from rllib_agentgym.envs.registry import SessionFactory, get_spec

TEXT_CHARSET = string.printable
MAX_TEXT = 1 << 20


def text_space() -> gym.spaces.Text:
    return gym.spaces.Text(max_length=MAX_TEXT, min_length=0, charset=TEXT_CHARSET)


class AgentGymEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, name: str, env_config: dict[str, Any] | None = None):
        env_config = dict(env_config or {})
        self.spec_ = get_spec(name)
        self.observation_space = text_space()
        self.action_space = text_space()
        self._factory = SessionFactory(self.spec_, env_config)
        self._session = self._factory.make()
        self._split_ids = self.spec_.split_ids(env_config.get("split", "train"))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        data_idx = options.get("data_idx")
        if data_idx is None:
            data_idx = int(self.np_random.choice(self._split_ids))
        observation = self._session.reset(int(data_idx))
        return observation, {"data_idx": int(data_idx), "instruction": self.spec_.instruction}

    def step(self, action: str):
        action_text, well_formed = self.spec_.action_for_server(action)
        result = self._session.step(action_text)
        info = dict(result.info)
        info["well_formed"] = well_formed
        return result.observation, float(result.reward), bool(result.done), False, info

    def close(self):
        self._session.close()
        self._factory.close()
