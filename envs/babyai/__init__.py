"""BabyAI (minigrid 3.2) behind AgentGym's text interface.

The 40 levels AgentGym uses, in its order (`levels.LEVELS`); task `data_idx`
plays level ``data_idx % 40 + 1`` with seed ``data_idx // 40``. Differences
from AgentGym's server, all deliberate:

- Level 4 is ``BabyAI-GoToObjS6-v1``: minigrid 3.2 deprecates (refuses to
  make) the ``-v0`` id AgentGym names.
- The goal is minigrid's mission verbatim. AgentGym rewrote "then" and
  "after you" to "and", which drops the order "after you" asks for.
- Paths are planned over every cell seen so far in the episode (AgentGym:
  only the current 7x7 view), so `go through` a door and come back works.
- `go to` the object already faced is a minigrid no-op step that lets the
  level check its goal, and `toggle` also opens boxes (KeyInBox needs it).
- Level-generation notes that minigrid prints go to the
  ``envs.babyai.levels`` logger, not stdout.

Known engine limits (measured, see the expert): in minigrid 3.2,
OpenDoorsOrderN4Debug's two-door missions cannot be won by anyone: the
toggle that opens the first door is checked again against the second, strict
instruction and fails the episode. minigrid's BabyAI bot fails KeyInBox and
PutNextS7N4Carrying (as its docstring says) and replans forever on some
UnlockToUnlock and GoToImpUnlock seeds, where the expert's guard gives up.

Modules: levels (ids, quiet construction), view (what is visible), describe
(text), planner (BFS over primitive moves), actions (the action list and
each action's moves), env (BabyAIEnv), tasks (splits, categories), expert
(ExpertAgent from minigrid's bot), server / __main__ (HTTP).
"""

from envs.babyai.env import BabyAIEnv

__all__ = ["BabyAIEnv"]
