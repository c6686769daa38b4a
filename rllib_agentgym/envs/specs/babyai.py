"""Agent side of BabyAI: the instruction prompt and ReAct action parsing.

The instruction follows AgentGym's BabyAI prompt, corrected to the action
strings the server accepts (`pickup <color> <object> <n>`; "pick up" is
accepted too) and completed with `drop` and `check available actions`.
"""

from __future__ import annotations

from rllib_agentgym.envs.spec import EnvSpec, parse_react_action

INSTRUCTION = """\
You are an exploration master that wants to finish every goal you are given. You are placed in a grid world of one or more rooms, joined by doors, that holds keys, balls and boxes of different colors. Every round I give you an observation: your goal (first round), the objects you can see with their position relative to you in steps, what you are carrying, and the list of available actions. You answer with your thought and one action from that list.

Objects are named by color, type and a number that ranks objects of the same name by distance, e.g. "red ball 1" is the nearest red ball you see. Doors also say whether they are open, closed or locked, e.g. "blue locked door 1".

Actions:
- turn left / turn right: turn in place
- move forward: move one step forward
- go to <color> <object> <n>: walk until you face that object
- pickup <color> <object> <n>: walk to that key, ball or box and pick it up (you can carry one thing)
- drop: put down what you carry in the empty cell in front of you
- toggle: open or close the door in front of you (a locked door opens only with a key of its color), or open the box in front of you
- go through <color> open door <n>: walk through that open door
- toggle and go through <color> closed door <n> / <color> locked door <n>: open that door and walk through it; a locked door needs the key of its color in your hands
- check available actions: list the actions you can take now

Only the actions in the current "Available actions" list can be done.

Answer every round in this format:
Thought: your reasoning about what to do next
Action: the single action to take"""

SPEC = EnvSpec(
    name="babyai",
    env_class="envs.babyai.env:BabyAIEnv",
    server_module="envs.babyai",
    instruction=INSTRUCTION,
    parse_action=parse_react_action,
    tasks_module="envs.babyai.tasks",
    default_max_new_tokens=128,
)
