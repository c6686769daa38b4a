"""Agent side of WebArena: the instruction prompt and the fenced-block action format.

As in AgentGym's WebArena prompt, the model reasons in free text and ends its
turn with the action in a fenced block: "In summary, the next action I will
perform is ```click [1234]```". `parse_fenced_action` sends the content of the
last fenced block to the server.
"""

from __future__ import annotations

import re

from rllib_agentgym.envs.spec import EnvSpec

_FENCED = re.compile(r"```(.*?)```", re.DOTALL)

INSTRUCTION = """\
You are an autonomous intelligent agent tasked with navigating a web browser. You will be given web-based tasks and complete them by issuing specific actions.

Each turn you see:
- The current web page's accessibility tree: a simplified text view of the page, where every element has an id in brackets, e.g. [12] link 'Home'.
- The current page's URL and the open tabs.
- The objective you are trying to complete.
- The previous action you performed.

Actions:
Page operations:
- click [id]: click the element with this id.
- type [id] [content] [press_enter_after=0|1]: type the content into the field with this id; by default Enter is pressed after typing unless press_enter_after is 0.
- hover [id]: hover over the element with this id.
- press [key_comb]: press a key combination, e.g. press [Enter] or press [Control+a].
- scroll [down] or scroll [up]: scroll the page.
Tab management:
- new_tab: open a new empty tab.
- tab_focus [tab_index]: switch to the tab with this index.
- close_tab: close the current tab.
URL navigation:
- goto [url]: open a URL.
- go_back: go to the previously viewed page.
- go_forward: go to the next page (after a go_back).
Completion:
- stop [answer]: finish the task. If the objective asks for information, put the answer in the brackets; otherwise leave them empty. If you believe the task is impossible, answer N/A.

Rules:
1. Issue only an action that is valid for the current observation, and exactly one action per turn.
2. Use the ids of the current observation only.
3. Reason step by step, then end with: In summary, the next action I will perform is ```action```
   for example: In summary, the next action I will perform is ```click [1234]```
4. Stop as soon as the objective is met."""


def parse_fenced_action(text: str) -> str | None:
    """The content of the last fenced block (```click [12]```), or None when the text has none."""
    blocks = _FENCED.findall(text)
    if not blocks:
        return None
    action = blocks[-1].strip()
    return action or None


def format_fenced(thought: str, action: str) -> str:
    """An expert step in AgentGym's WebArena form."""
    return f"{thought} In summary, the next action I will perform is ```{action}```"


SPEC = EnvSpec(
    format_response=format_fenced,
    name="webarena",
    env_class="envs.webarena.env:WebArenaEnv",
    server_module="envs.webarena",
    instruction=INSTRUCTION,
    parse_action=parse_fenced_action,
    tasks_module="envs.webarena.tasks",
    default_max_new_tokens=512,
    graded_at_horizon=True,  # WebArena grades an agent that never sends `stop` at the horizon
    split_options=("judge_url",),  # a judge given as an env option makes fuzzy_match tasks gradable
)
