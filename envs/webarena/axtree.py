"""Render Chromium's accessibility tree as WebArena's text observation.

Input: the `nodes` of CDP `Accessibility.getFullAXTree`. Output: one line per
node worth showing, indented by depth, with the AX node id the agent uses in
its actions:

    [10] RootWebArea 'USB-C Charging Cable 2m - OneStop Market' focused: True
        [19] link 'Home'
        [3] textbox 'Search' value: 'cable'
        [29] heading 'USB-C Charging Cable 2m'

What is left out (so a page fits a model's context): ignored nodes (their
children move up), inline text boxes and list bullets, unnamed structural wrappers (generic,
paragraph, list items, ...), static text that repeats its parent's name, the
insides of text fields (their value is shown as `value:`), and noise
properties (focusable, editable, ...). A row's name is dropped because its
cells follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

_SKIP_SUBTREE = {"InlineTextBox", "LineBreak", "ListMarker"}
# Shown only when they carry a name: otherwise their children move up a level.
_WRAPPERS = {
    "generic",
    "paragraph",
    "LabelText",
    "Section",
    "group",
    "none",
    "presentation",
    "strong",
    "emphasis",
    "DescriptionList",
    "article",
    "region",
    "form",
    "search",
    "list",
    "listitem",
    "term",
    "definition",
    "banner",
    "navigation",
    "main",
    "contentinfo",
    "complementary",
    "rowgroup",
    "time",
    "Abbr",
    "mark",
    "code",
    "blockquote",
    "caption",
    "figure",
    "Legend",
    "sectionheader",
    "sectionfooter",
}
_FIELDS = {"textbox", "searchbox", "combobox", "spinbutton", "slider"}
_NAMELESS = {"row"}
# Boolean states worth showing only when true; the rest always when present.
_TRUE_ONLY = {"focused", "required", "disabled", "selected", "modal", "multiselectable"}
_SHOWN = _TRUE_ONLY | {"checked", "expanded", "pressed"}


def _value(node: dict[str, Any], key: str) -> Any:
    return (node.get(key) or {}).get("value")


@dataclass
class AXSnapshot:
    """The rendered lines and the nodes behind them (to act on an id)."""

    lines: list[str]
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    root_name: str = ""  # the RootWebArea's name: the document title

    def backend_ids(self, node_id: str) -> list[int]:
        """DOM backend ids to act on for `node_id`: the node's own first, then its ancestors'."""
        out: list[int] = []
        node = self.nodes.get(node_id)
        while node is not None:
            if node.get("backendDOMNodeId") is not None:
                out.append(int(node["backendDOMNodeId"]))
            node = self.nodes.get(node.get("parentId", ""))
        return out

    def role(self, node_id: str) -> str:
        return str(_value(self.nodes.get(node_id, {}), "role") or "")


def render(nodes: list[dict[str, Any]], in_view: Callable[[int], bool | None] | None = None) -> AXSnapshot:
    """Render the tree. `in_view(backend_id)` (False: off screen, None: unknown) hides off-screen nodes
    but not their children, which may be on screen; the root is always shown."""
    by_id = {n["nodeId"]: n for n in nodes}
    root_id = nodes[0]["nodeId"] if nodes else ""
    snapshot = AXSnapshot(lines=[], nodes=by_id)
    if not nodes:
        return snapshot
    snapshot.root_name = " ".join(str(_value(nodes[0], "name") or "").split())

    def visit(node_id: str, depth: int, parent_name: str) -> None:
        node = by_id.get(node_id)
        if node is None:
            return
        role = str(_value(node, "role") or "")
        if role in _SKIP_SUBTREE:
            return
        name = " ".join(str(_value(node, "name") or "").split())
        shown = not node.get("ignored", False)
        if role in _WRAPPERS and not name:
            shown = False
        if role == "StaticText" and (not name or name in parent_name):
            shown = False
        if shown and in_view is not None and node_id != root_id and node.get("backendDOMNodeId") is not None:
            shown = in_view(int(node["backendDOMNodeId"])) is not False
        if shown:
            snapshot.lines.append("\t" * depth + _line(node_id, role, name, node))
            depth, parent_name = depth + 1, name
            if role in _FIELDS:
                return  # the field's inner editor only repeats its value
        for child in node.get("childIds") or ():
            visit(child, depth, parent_name)

    visit(root_id, 0, "")
    return snapshot


def _line(node_id: str, role: str, name: str, node: dict[str, Any]) -> str:
    text = f"[{node_id}] {role}"
    if name and role not in _NAMELESS:
        text += f" '{name}'"
    value = _value(node, "value")
    if role in _FIELDS and value not in (None, ""):
        text += f" value: '{value}'"
    for prop in node.get("properties") or ():
        key, val = prop.get("name"), (prop.get("value") or {}).get("value")
        if key not in _SHOWN or (key in _TRUE_ONLY and val in (None, "", "false", False)):
            continue
        text += f" {key}: {val}"
    return text
