"""Agent side of SciWorld (ScienceWorld): the instruction prompt and ReAct action parsing.

The action list follows AgentGym's SciWorld prompt (the engine's action
templates, OBJ / LOC standing for an object or a place), plus this
framework's `check valid actions`, which lists the templates and the objects
in view.
"""

from __future__ import annotations

from rllib_agentgym.envs.spec import EnvSpec, parse_react_action

INSTRUCTION = """\
You are an agent in ScienceWorld, a text simulation of elementary science experiments (boiling, melting, measuring temperatures, electric circuits, conductivity, classifying living things, mixing chemicals and paints, animal lifespans, life stages). Every turn I give you an observation; you answer with one action to make progress on the task, which is stated in the first observation.

Actions (OBJ is an object and LOC a place, named as the observations name them):
- open OBJ / close OBJ: open or close a container or a door
- activate OBJ / deactivate OBJ: turn a device on or off
- connect OBJ to OBJ: connect electrical components
- disconnect OBJ: disconnect electrical components
- use OBJ [on OBJ]: use a device or an item, e.g. "use thermometer on water"
- look around: describe the current room
- look at OBJ: describe an object in detail
- look in OBJ: describe a container's contents
- read OBJ: read a note or a book
- move OBJ to OBJ: move an object into a container, e.g. "move metal pot to stove"
- pick up OBJ: move an object to your inventory
- put down OBJ: drop an inventory item
- pour OBJ into OBJ: pour a liquid into a container
- dunk OBJ into OBJ: dunk a container into a liquid
- mix OBJ: chemically mix a container
- go to LOC: move to a new location (open the door first)
- eat OBJ: eat a food
- flush OBJ: flush a toilet
- focus on OBJ: signal your intent on a task object; focus only on the object the task asks about, a wrong focus fails the task
- wait: take no action for 10 iterations
- wait1: take no action for 1 iteration
- task: describe the current task
- inventory: list your inventory
- check valid actions: list the action templates and the objects you can refer to here

If the environment answers that your request is ambiguous, reply with the number of the option you mean, e.g. "0".

Answer every turn in this format:
Thought: your reasoning about what to do next
Action: the single action to take"""

SPEC = EnvSpec(
    name="sciworld",
    env_class="envs.sciworld.env:SciWorldEnv",
    server_module="envs.sciworld",
    instruction=INSTRUCTION,
    parse_action=parse_react_action,
    tasks_module="envs.sciworld.tasks",
    default_max_new_tokens=128,
)
