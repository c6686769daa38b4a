"""BabyAIEnv: one minigrid BabyAI session behind AgentGym's text interface.

Task ids follow AgentGym: `data_idx` plays level ``data_idx % 40 + 1`` of
`levels.LEVELS` with seed ``data_idx // 40``. Each text action from the
current action list expands into minigrid primitive moves (see `actions.py`),
executed one by one until the plan ends or the level ends. The reward is
minigrid's own: ``1 - 0.9 * steps / max_steps`` on success (steps counted in
primitive moves), else 0. The episode is done at success, at a level's
failure (the Debug levels end on a wrong move) or at minigrid's step limit.

Observations follow AgentGym: reset and `observation()` start with "Your
goal: <mission>"; a step answers the new state and the action list.

An action that is not in the list changes nothing in the grid and costs the
agent a turn: the observation says why it was refused and lists what is
available. `check available actions` is always available and only repeats
the state and the list.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from minigrid.minigrid_env import MiniGridEnv

from envs.babyai.actions import CHECK, ActionTable, build_actions, can_stand_on
from envs.babyai.describe import describe, format_actions
from envs.babyai.levels import level_of, make_level, seed_of
from envs.babyai.planner import DIR_VECS, FORWARD
from envs.babyai.view import View, compute_view
from envs.common.env import StepResult

_QUOTES = "\"'`"


def normalize_action(action: str) -> str:
    """Lower-case, trim quotes / a final period, squeeze spaces; "pick up" -> "pickup"."""
    text = " ".join(action.strip().strip(_QUOTES).strip().rstrip(".").split()).lower()
    return re.sub(r"^pick up\b", "pickup", text)


class BabyAIEnv:
    """A BabyAI level played through text (the env contract of `envs.common.env`)."""

    def __init__(self) -> None:
        self._gym = None
        self._level_id: str | None = None
        self._known: np.ndarray | None = None
        self._view: View | None = None
        self._table = ActionTable()
        self._description = ""
        self._done = False
        self._success = False

    # ---- read-only state (the expert and the server's extra routes use it) ----

    @property
    def minigrid(self) -> MiniGridEnv:
        self._require_task()
        return self._gym.unwrapped

    @property
    def level_id(self) -> str | None:
        return self._level_id

    @property
    def goal(self) -> str:
        return self.minigrid.mission

    @property
    def known(self) -> np.ndarray:
        """known[x, y]: the agent has seen cell (x, y) during this episode."""
        self._require_task()
        return self._known.copy()

    @property
    def view(self) -> View:
        self._require_task()
        return self._view

    def available_actions(self) -> list[str]:
        self._require_task()
        return self._table.available

    # ---- the env contract ----

    def reset(self, data_idx: int) -> str:
        level_id, seed = level_of(data_idx), seed_of(data_idx)
        if level_id != self._level_id:
            self.close()
            self._gym = make_level(level_id)
            self._level_id = level_id
        obs, _ = self._gym.reset(seed=seed)
        env = self._gym.unwrapped
        self._known = np.zeros((env.width, env.height), dtype=bool)
        self._done = self._success = False
        self._see(obs["image"])
        self._update_actions()
        return self.observation()

    def step(self, action: str) -> StepResult:
        self._require_task()
        if self._done:
            return StepResult(
                "The task is already over. Reset the environment to start a new one.",
                0.0,
                True,
                self._info(invalid=True),
            )
        name = normalize_action(action)
        if name == CHECK:
            return StepResult(self._state_text(), 0.0, False, self._info(invalid=False))
        plan = self._table.plans.get(name)
        if plan is None:
            reason = self._table.errors.get(
                name, f'"{action.strip()}" is not a valid action. Please choose one of the available actions.'
            )
            return StepResult(
                f"{reason}\n{format_actions(self._table.available)}", 0.0, False, self._info(invalid=True)
            )

        reward, ended_by = self._execute(plan)
        self._update_actions()
        text = self._description
        if self._success:
            text += "\nThe task is completed."
        elif ended_by == "failure":
            text += "\nThe task has failed: that move broke the level's rules."
        elif ended_by == "truncated":
            text += "\nThe task has failed: you ran out of steps."
        return StepResult(
            f"{text}\n{format_actions(self._table.available)}", reward, self._done, self._info(invalid=False)
        )

    def observation(self) -> str:
        return f"Your goal: {self.goal}\n{self._state_text()}"

    def close(self) -> None:
        if self._gym is not None:
            self._gym.close()
        self._gym = None
        self._level_id = None

    # ---- internals ----

    def _execute(self, plan: list[int]) -> tuple[float, str | None]:
        """Run primitive moves; stop early when a step forward is blocked or the level ends."""
        env = self._gym.unwrapped
        reward = 0.0
        for primitive in plan:
            if primitive == FORWARD:
                dx, dy = DIR_VECS[env.agent_dir]
                if not can_stand_on(env.grid.get(env.agent_pos[0] + dx, env.agent_pos[1] + dy)):
                    break
            obs, step_reward, terminated, truncated, _ = self._gym.step(primitive)
            reward += float(step_reward)
            self._see(obs["image"])
            if terminated or truncated:
                self._done = True
                self._success = terminated and step_reward > 0
                if self._success:
                    return reward, "success"
                return reward, "failure" if terminated else "truncated"
        return reward, None

    def _see(self, image: np.ndarray) -> None:
        self._view = compute_view(self._gym.unwrapped, image)
        for (x, y), _, _ in self._view.cells:
            self._known[x, y] = True

    def _update_actions(self) -> None:
        env = self._gym.unwrapped
        self._table = build_actions(env, self._view, self._known)
        self._description = describe(env, self._view)

    def _state_text(self) -> str:
        return f"{self._description}\n{format_actions(self._table.available)}"

    def _info(self, *, invalid: bool) -> dict[str, Any]:
        env = self._gym.unwrapped
        return {
            "success": self._success,
            "invalid_action": invalid,
            "level": self._level_id,
            "primitive_steps": int(env.step_count),
            "max_primitive_steps": int(env.max_steps),
        }

    def _require_task(self) -> None:
        if self._gym is None:
            raise RuntimeError("no task yet: call reset(data_idx) first")
