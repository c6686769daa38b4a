"""WebArena's action space: parse `click [12]`, `type [7] [shoes] [1]`, ... into an `Action`.

The model writes its reasoning and ends with a fenced block, as in AgentGym:
"In summary, the next action I will perform is ```click [1234]```". The
client sends the block's content; the server also accepts the whole text and
takes its last fenced block (`extract_action`), so either side may extract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTION_HELP = """Valid actions:
click [id]                  click the element with this id
type [id] [text] [0|1]      type text into the field; 1 (the default) presses Enter after it
hover [id]                  move the mouse over the element
press [key_comb]            press a key combination, e.g. press [Enter], press [Control+a]
scroll [down|up]            scroll the page
new_tab                     open a new empty tab
tab_focus [tab_index]       switch to the tab with this index
close_tab                   close the current tab
goto [url]                  open a URL in the current tab
go_back                     go to the previous page
go_forward                  go to the next page
stop [answer]               end the task; put the answer in the brackets (or leave them empty)"""

_FENCED = re.compile(r"```(.*?)```", re.DOTALL)
_VERB = re.compile(r"^([A-Za-z_]+)\s*(.*)$", re.DOTALL)
_ID = re.compile(r"^\[\s*(\d+)\s*\]$")
_TYPE = re.compile(r"^\[\s*(\d+)\s*\]\s*\[(.*)\]$", re.DOTALL)
_ENTER_FLAG = re.compile(r"^(.*)\]\s*\[\s*([01])\s*$", re.DOTALL)
_BRACKETED = re.compile(r"^\[(.*)\]$", re.DOTALL)
_SCROLL = re.compile(r"^\[\s*(?:direction\s*=\s*)?(up|down)\s*\]$", re.IGNORECASE)
_NO_ARGUMENT = {"new_tab", "close_tab", "go_back", "go_forward"}
_KEY_ALIASES = {
    "ctrl": "Control",
    "control": "Control",
    "cmd": "Meta",
    "command": "Meta",
    "meta": "Meta",
    "alt": "Alt",
    "option": "Alt",
    "shift": "Shift",
    "enter": "Enter",
    "return": "Enter",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "Space",
    "backspace": "Backspace",
    "delete": "Delete",
    "del": "Delete",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "arrowup": "ArrowUp",
    "arrowdown": "ArrowDown",
    "arrowleft": "ArrowLeft",
    "arrowright": "ArrowRight",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "home": "Home",
    "end": "End",
}


class ActionError(ValueError):
    """The action text is not a valid WebArena action; the message says why."""


@dataclass(frozen=True)
class Action:
    """One parsed action. `element` is an AX node id; `text` the typed text, key, URL, direction or answer."""

    kind: str
    element: str = ""
    text: str = ""
    enter: bool = True
    index: int = 0

    def __str__(self) -> str:
        if self.kind in ("click", "hover"):
            return f"{self.kind} [{self.element}]"
        if self.kind == "type":
            return f"type [{self.element}] [{self.text}] [{int(self.enter)}]"
        if self.kind == "tab_focus":
            return f"tab_focus [{self.index}]"
        if self.kind in _NO_ARGUMENT:
            return self.kind
        return f"{self.kind} [{self.text}]"


def extract_action(text: str) -> str:
    """The content of the last fenced block of `text`, or the stripped text when it has none."""
    blocks = _FENCED.findall(text)
    return blocks[-1].strip() if blocks else text.strip()


def normalize_key(key_comb: str) -> str:
    """`ctrl+a` -> `Control+a`, `enter` -> `Enter` (Playwright's key names)."""
    parts = [p.strip() for p in key_comb.split("+")]
    if any(not p for p in parts):
        raise ActionError(f"bad key combination '{key_comb}'")
    return "+".join(_KEY_ALIASES.get(p.lower(), p) for p in parts)


def parse_action(text: str) -> Action:
    """Parse one action (a fenced block is unwrapped first); raises ActionError with a readable message."""
    raw = extract_action(text)
    if not raw:
        raise ActionError("empty action")
    match = _VERB.match(raw)
    if match is None:
        raise ActionError(f"cannot read an action from '{raw[:80]}'")
    verb, rest = match.group(1).lower(), match.group(2).strip()
    if verb in ("click", "hover"):
        m = _ID.match(rest)
        if m is None:
            raise ActionError(f"'{verb}' takes an element id: {verb} [id]")
        return Action(verb, element=m.group(1))
    if verb == "type":
        m = _TYPE.match(rest)
        if m is None:
            raise ActionError("'type' takes an element id and the text: type [id] [text] [0|1]")
        content, enter = m.group(2), True
        flag = _ENTER_FLAG.match(content)
        if flag is not None:
            content, enter = flag.group(1), flag.group(2) == "1"
        return Action("type", element=m.group(1), text=content, enter=enter)
    if verb == "press":
        m = _BRACKETED.match(rest)
        if m is None or not m.group(1).strip():
            raise ActionError("'press' takes a key combination: press [key_comb], e.g. press [Enter]")
        return Action("press", text=normalize_key(m.group(1).strip()))
    if verb == "scroll":
        m = _SCROLL.match(rest)
        if m is None:
            raise ActionError("'scroll' takes a direction: scroll [down] or scroll [up]")
        return Action("scroll", text=m.group(1).lower())
    if verb == "tab_focus":
        m = _ID.match(rest)
        if m is None:
            raise ActionError("'tab_focus' takes a tab index: tab_focus [0]")
        return Action("tab_focus", index=int(m.group(1)))
    if verb == "goto":
        m = _BRACKETED.match(rest)
        if m is None or not m.group(1).strip():
            raise ActionError("'goto' takes a URL: goto [http://...]")
        return Action("goto", text=m.group(1).strip())
    if verb == "stop":
        if not rest:
            return Action("stop")
        m = _BRACKETED.match(rest)
        if m is None:
            raise ActionError("'stop' takes the answer in brackets: stop [answer] (or stop [] without one)")
        return Action("stop", text=m.group(1).strip())
    if verb in _NO_ARGUMENT:
        if rest:
            raise ActionError(f"'{verb}' takes no argument")
        return Action(verb)
    raise ActionError(f"unknown action '{verb}'")
