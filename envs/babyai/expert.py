"""Expert for BabyAI: minigrid's BabyAI bot, speaking the env's text actions.

`minigrid.utils.baby_ai_bot.BabyAIBot` plans with a stack of subgoals (go
next to X, pick up, open, drop, explore) and suggests one primitive move per
call. We run it on the env's own minigrid instance and translate:

- while its current subgoal is "go next to" a visible object the env can
  plan to, we send the env's high-level `go to <label>`, or `pickup <label>`
  when the next subgoal is to pick that object up, or `toggle and go through
  <label>` when it is to open that closed door; while it explores or heads
  for an object through a visible open door, `go through <door>`. So a
  trajectory uses the compact actions an LLM agent sees;
- otherwise its primitive maps to `turn left` / `turn right` /
  `move forward` / `pickup <label of the object in front>` / `drop` /
  `toggle` (and minigrid's no-op "done" to `go to` the object already faced).

The bot replans from the real grid on every call, so letting the env's
planner walk a different but equally valid path leaves it consistent. Its
map of seen cells is topped up from the env's map, since macro moves see
cells the bot never got to look at.

The bot is known to fail some levels (KeyInBox, PutNext...Carrying) and can
spin in its replanning loop, so every call runs under guards: a bound on
subgoals pushed per call, a wall-clock budget per episode and a bound on
actions per episode. When a guard trips or the bot errors, `act` raises
`ExpertGaveUp`; callers drop that episode.
"""

from __future__ import annotations

import time

from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.verifier import ObjDesc
from minigrid.utils.baby_ai_bot import (
    BabyAIBot,
    CloseSubgoal,
    DisappearedBoxError,
    DropSubgoal,
    ExploreSubgoal,
    GoNextToSubgoal,
    OpenSubgoal,
    PickupSubgoal,
)

from envs.babyai.env import BabyAIEnv
from envs.babyai.planner import DIR_VECS, DONE, DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE
from envs.babyai.view import SeenObject

_PRIMITIVE_TEXT = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward", DROP: "drop", TOGGLE: "toggle"}


class ExpertGaveUp(RuntimeError):
    """The bot cannot (or, within its budget, did not) produce a next action."""


class _GuardedStack(list):
    """The bot's subgoal stack, counting pushes so a replanning loop cannot spin forever."""

    def __init__(self, items, expert: ExpertAgent):
        super().__init__(items)
        self._expert = expert

    def append(self, subgoal) -> None:
        self._expert._count_push()
        super().append(subgoal)


# How each thought begins. "restate" words the goal as a sentence; "quote" repeats the observation's
# "goal: ..." verbatim, so that the copy is a plain induction (find the earlier "goal:", copy what follows).
THOUGHT_STYLES = {"restate": "My goal is to {goal}.", "quote": "My goal: {goal}."}


class ExpertAgent:
    """Deterministic BabyAI expert; `env` must have just been reset to a task."""

    def __init__(self, env: BabyAIEnv, *, time_budget_s: float = 10.0, max_pushes_per_act: int = 100,
                 thoughts: str = "restate"):
        if thoughts not in THOUGHT_STYLES:
            raise ValueError(f"thoughts must be one of {list(THOUGHT_STYLES)}, not {thoughts!r}")
        self._goal_text = THOUGHT_STYLES[thoughts]
        self._env = env
        self._bot = BabyAIBot(env.minigrid)
        self._bot.stack = _GuardedStack(self._bot.stack, self)
        self._deadline = time.monotonic() + time_budget_s
        self._max_pushes = max_pushes_per_act
        self._pushes = 0
        self._max_actions = int(env.minigrid.max_steps)
        self._actions = 0
        self._retire_go_next_to = False

    def act(self, observation: str) -> tuple[str, str]:
        """(thought, action) for the env's current state; `observation` is not needed."""
        self._actions += 1
        if self._actions > self._max_actions:
            raise ExpertGaveUp(f"no success within {self._max_actions} actions")
        bot = self._bot
        bot.vis_mask |= self._env.known
        if self._retire_go_next_to:
            # The last action did the bot's "go next to" and the subgoal below
            # it (pick up / open) at once: retire the first here; replan(),
            # told nothing else happened, retires the second as done.
            bot.stack.pop()
            self._retire_go_next_to = False
        self._pushes = 0
        try:
            primitive = bot.replan()
        except (AssertionError, DisappearedBoxError, IndexError, RecursionError) as exc:
            raise ExpertGaveUp(f"the BabyAI bot failed: {exc!r}") from exc
        return self._translate(primitive)

    def _count_push(self) -> None:
        self._pushes += 1
        if self._pushes > self._max_pushes:
            raise ExpertGaveUp(f"the bot pushed over {self._max_pushes} subgoals in one call")
        if time.monotonic() > self._deadline:
            raise ExpertGaveUp("the bot ran out of its wall-clock budget")

    def _translate(self, primitive: int) -> tuple[str, str]:
        env, stack = self._env, self._bot.stack
        available = set(env.available_actions())
        top = stack[-1] if stack else None
        goal = self._goal_text.format(goal=env.goal)

        if primitive in (LEFT, RIGHT, FORWARD) and isinstance(top, GoNextToSubgoal):
            macro = self._macro(top, stack[-2] if len(stack) >= 2 else None, available)
            if macro is not None:
                return f"{goal} {macro[0]}", macro[1]

        front = self._front_object()
        if primitive == PICKUP:
            if front is None:
                raise ExpertGaveUp("the bot wants to pick up, but nothing visible is in front")
            action = f"pickup {front.label}"
        elif primitive == DONE:
            if front is None:
                raise ExpertGaveUp("the bot thinks the task is done, but the level did not end")
            action = f"go to {front.label}"
        else:
            action = _PRIMITIVE_TEXT[primitive]
        if action not in available:
            raise ExpertGaveUp(f"the bot's move {action!r} is not an available action")
        return f"{goal} {self._subgoal_text(top, front)}", action

    def _macro(self, top: GoNextToSubgoal, below, available: set[str]) -> tuple[str, str] | None:
        """A high-level action doing what the bot's next few primitive moves would."""
        target = self._target_of(top) if top.reason in (None, "Open") else None
        if target is not None:
            if top.reason is None and isinstance(below, PickupSubgoal) and f"pickup {target.label}" in available:
                self._retire_go_next_to = True
                return f"I will go to the {target.name} and pick it up.", f"pickup {target.label}"
            walk_in = f"toggle and go through {target.label}"
            if (
                top.reason == "Open"
                and isinstance(below, OpenSubgoal)
                and "closed" in target.name
                and walk_in in available
            ):
                self._retire_go_next_to = True
                return f"I will open the {target.name} and walk through it.", walk_in
            if f"go to {target.label}" in available:
                why = " to open it" if top.reason == "Open" else ""
                return f"I will go to the {target.name}{why}.", f"go to {target.label}"
        # Positions the bot heads for for other reasons (a spot to drop or take
        # back something) are bookkeeping it relies on: walk those move by move.
        heads_for_object = isinstance(top.datum, (ObjDesc, WorldObj)) and top.reason in (None, "Open")
        door = self._open_door_on_route(top) if top.reason == "Explore" or heads_for_object else None
        if door is not None and f"go through {door.label}" in available:
            why = "explore further" if top.reason == "Explore" else "get closer to where I am heading"
            return f"I will go through the {door.name} to {why}.", f"go through {door.label}"
        return None

    def _open_door_on_route(self, subgoal: GoNextToSubgoal) -> SeenObject | None:
        """The first visible open door on the bot's route for `subgoal` (not its end)."""
        target = self._target_pos(subgoal)
        if target is None:
            return None
        path, _, _ = self._bot._shortest_path(lambda pos, cell: pos == target)
        grid = self._env.minigrid.grid
        for pos in (path or [])[:-1]:
            cell = grid.get(*pos)
            if cell is not None and cell.type == "door" and cell.is_open:
                return self._env.view.object_at((int(pos[0]), int(pos[1])))
        return None

    def _target_pos(self, subgoal: GoNextToSubgoal) -> tuple[int, int] | None:
        datum = subgoal.datum
        if isinstance(datum, ObjDesc):
            _, pos = self._bot._find_obj_pos(datum, subgoal.reason == "PutNext")
        elif isinstance(datum, WorldObj):
            pos = datum.cur_pos
        else:
            pos = datum
        return None if pos is None else (int(pos[0]), int(pos[1]))

    def _target_of(self, subgoal: GoNextToSubgoal) -> SeenObject | None:
        """The visible object a "go next to" subgoal is heading for, if any."""
        pos = self._target_pos(subgoal)
        return None if pos is None else self._env.view.object_at(pos)

    def _front_object(self) -> SeenObject | None:
        env = self._env.minigrid
        dx, dy = DIR_VECS[env.agent_dir]
        return self._env.view.object_at((int(env.agent_pos[0] + dx), int(env.agent_pos[1] + dy)))

    def _subgoal_text(self, subgoal, front: SeenObject | None) -> str:
        carrying = self._env.minigrid.carrying
        if isinstance(subgoal, PickupSubgoal) and front is not None:
            return f"I will pick up the {front.name} in front of me."
        if isinstance(subgoal, DropSubgoal) and carrying is not None:
            return f"I will put down the {carrying.color} {carrying.type} I am carrying here."
        if isinstance(subgoal, OpenSubgoal) and front is not None:
            verb = "unlock" if "locked" in front.name else "open"
            return f"I will {verb} the {front.name} in front of me."
        if isinstance(subgoal, CloseSubgoal):
            return "I will close the door in front of me."
        if isinstance(subgoal, ExploreSubgoal) or (
            isinstance(subgoal, GoNextToSubgoal) and subgoal.reason == "Explore"
        ):
            return "I have not seen everything I need yet, so I will explore."
        if isinstance(subgoal, GoNextToSubgoal):
            target = self._target_of(subgoal)
            if subgoal.reason == "PutNext" and target is not None:
                return f"I will move next to the {target.name} to put what I carry beside it."
            if target is not None:
                return f"I will make my way to the {target.name}."
            return "I will move to a free spot."
        if subgoal is None and front is not None:
            return f"I am facing the {front.name}, which should complete the task."
        return "I will take the next step of my plan."
