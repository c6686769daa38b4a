"""WebArenaEnv: one browser context playing WebArena tasks against the embedded sites or a real deployment.

Episode: `reset(data_idx)` restores the embedded sites' data of this session,
opens a fresh browser context on the task's `start_url` and returns the
first observation. Each `step(action)` performs one WebArena action (see
actions.py) and returns the new observation. `stop [answer]` ends the episode
and grades it with the task's evaluators: reward 1.0 or 0.0, done True. A
client that stops an episode at its turn horizon calls `evaluate()` (HTTP:
GET /evaluate?id=N), which grades the current state with an empty answer, as
WebArena does when the agent never stops. With the `max_steps` option the env
does that itself at the given step.

Observation (WebArena's prompt layout):

    OBSERVATION:
    Tab 0 (current): <title>

    [10] RootWebArea '<title>' focused: True
        [19] link 'Home'
        ...
    URL: <url>
    OBJECTIVE: <intent>
    PREVIOUS ACTION: <last action or None>

The tree is cut at `max_obs_tokens` tokens, counted as characters / 4 (a
close enough estimate for English and markup under BPE tokenizers); a note
says how many lines were cut. An invalid action (bad syntax, unknown id, a
tab that does not exist) costs a step and puts "INVALID ACTION: <why>" above
the observation; info["invalid_action"] is True.

Info on the final step: "success" (bool), "score" (float), "eval_details"
(one line per evaluator), "answer", and "skipped": True when the task needs
the LLM judge (fuzzy_match) and none is configured (or the judge failed), or
its program_html uses WebArena's func: helpers. A skipped episode has
reward 0.0 and success False, so the client must read info["skipped"] to
tell "not graded" from "failed"; tasks.skipped_ids lists such tasks up front.

Isolation: every env has a random session id, sent as the `wa_session`
cookie to the embedded sites, which keep one SQLite copy per session; reset
restores the copy from the seed. A real WebArena deployment (SHOPPING=...)
is shared and not reset by this env, as in WebArena itself.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Mapping

from envs.common.env import StepResult
from envs.webarena import tasks as task_sets
from envs.webarena.actions import ACTION_HELP, Action, ActionError, parse_action
from envs.webarena.browser import BrowserSession, ElementError
from envs.webarena.evaluators import Judge, NotGraded, evaluate
from envs.webarena.sites import SESSION_COOKIE, embedded_sites

_task_sets: dict[str, task_sets.TaskSet] = {}


def _task_set(path: str | None) -> task_sets.TaskSet:
    if path is None:
        return task_sets.default_set()
    key = str(Path(path).resolve())
    if key not in _task_sets:
        _task_sets[key] = task_sets.TaskSet(key)
    return _task_sets[key]


class WebArenaEnv:
    """WebArena in a real Chromium. Options (all keyword, from the /create body):

    tasks:           task directory or JSON list file (default: WEBARENA_TASKS or the embedded tasks)
    site_urls:       {"SHOPPING": url, ...} overriding environment variables and embedded sites
    max_obs_tokens:  token budget of the accessibility tree (characters / 4)
    max_steps:       grade and end the episode after this many steps (0: only at stop / evaluate())
    judge_url, judge_model, judge_api_key: the OpenAI-compatible LLM judge for fuzzy_match
    viewport_width, viewport_height, timeout_ms: browser settings
    viewport_only:   observe only the elements on screen (WebArena's current_viewport_only); by default
                     the whole page's tree, cut at max_obs_tokens
    """

    def __init__(
        self,
        tasks: str | None = None,
        site_urls: Mapping[str, str] | None = None,
        max_obs_tokens: int = 2048,
        max_steps: int = 0,
        judge_url: str | None = None,
        judge_model: str | None = None,
        judge_api_key: str | None = None,
        viewport_width: int = 1280,
        viewport_height: int = 720,
        timeout_ms: int = 15000,
        viewport_only: bool = False,
    ):
        self.tasks = _task_set(tasks)
        self._site_urls = dict(site_urls or {})
        self.max_obs_tokens = int(max_obs_tokens)
        self.max_steps = int(max_steps)
        self.judge = Judge.configured(judge_url, judge_model, judge_api_key)
        self.session_id = uuid.uuid4().hex
        self._browser = BrowserSession((viewport_width, viewport_height), timeout_ms, bool(viewport_only))
        self._uses_embedded = False
        self.task: dict[str, Any] | None = None
        self.data_idx = -1
        self._obs = ""
        self._done = False
        self._steps = 0
        self._previous = "None"
        self.result: dict[str, Any] | None = None

    # -- episode ---------------------------------------------------------

    def reset(self, data_idx: int) -> str:
        raw = self.tasks.task(int(data_idx))
        needed = task_sets.placeholders_in(raw)
        embedded = None
        if needed & set(task_sets.EMBEDDED_SITES):
            embedded = embedded_sites().urls
        urls = task_sets.site_urls(self._site_urls, embedded)
        task = task_sets.resolve(raw, urls)
        embedded_urls = set(embedded.values()) if embedded else set()
        uses_embedded = any(urls.get(p) in embedded_urls for p in needed)
        if uses_embedded:
            embedded_sites().reset(self.session_id)
        self._uses_embedded |= uses_embedded
        cookies = [{"name": SESSION_COOKIE, "value": self.session_id, "url": url} for url in sorted(embedded_urls)]
        storage = task.get("storage_state")
        self._browser.start(cookies, storage if storage and Path(storage).is_file() else None)
        start_urls = [u.strip() for u in str(task["start_url"]).split(" |AND| ")]
        try:
            for n, url in enumerate(start_urls):
                if n:
                    self._browser.execute(Action("new_tab"))
                self._browser.goto(url)
        except ElementError as exc:
            raise ValueError(f"the task's start_url does not open: {exc}") from None
        if len(start_urls) > 1:
            self._browser.execute(Action("tab_focus", index=0))
        self.task, self.data_idx = task, int(data_idx)
        self._done, self._steps, self._previous, self.result = False, 0, "None", None
        self._obs = self._render()
        return self._obs

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("reset() before step()")
        if self._done:
            return StepResult("The episode is over: reset to start a new task.", 0.0, True, {"invalid_action": True})
        self._steps += 1
        info: dict[str, Any] = {"invalid_action": False}
        problem = None
        try:
            parsed = parse_action(action)
            if parsed.kind == "stop":
                self._previous = str(parsed)
                return self._finish(parsed.text)
            if parsed.kind == "goto" and not parsed.text.startswith(("http://", "https://", "about:blank")):
                raise ActionError("goto opens http(s) URLs only")
            self._browser.execute(parsed)
            self._previous = str(parsed)
        except ActionError as exc:
            problem = f"{exc}\n{ACTION_HELP}"
        except ElementError as exc:
            problem = str(exc)
        if problem is not None:
            info["invalid_action"] = True
            self._previous = f"{action.strip()[:200]} (invalid)"
        if self.max_steps and self._steps >= self.max_steps:
            result = self._finish("")
            result.info["invalid_action"] = info["invalid_action"]
            return result
        self._obs = self._render(problem)
        return StepResult(self._obs, 0.0, False, info)

    def observation(self) -> str:
        return self._obs

    def evaluate(self) -> dict[str, Any]:
        """Grade the current state now (the client's horizon) and end the episode; idempotent."""
        if self.task is None:
            raise RuntimeError("reset() before evaluate()")
        if not self._done:
            self._finish("")
        assert self.result is not None
        return self.result

    def close(self) -> None:
        self._browser.close()
        if self._uses_embedded:
            embedded_sites().drop(self.session_id)
            self._uses_embedded = False

    # -- internals -------------------------------------------------------

    def _finish(self, answer: str) -> StepResult:
        assert self.task is not None
        self._done = True
        info: dict[str, Any] = {"invalid_action": False, "answer": answer, "skipped": False}
        try:
            graded = evaluate(self.task, answer, self._browser.page.url, self._browser, self.judge)
            score, details = graded.score, graded.details
        except NotGraded as exc:  # no judge configured, it failed, or an unsupported func: helper
            score, details, info["skipped"] = 0.0, [str(exc)], True
        info.update(success=score >= 1.0, score=score, eval_details=details)
        self.result = {"reward": score, **info}
        self._obs = f"The episode is over. Answer: {answer!r}. " + (
            "Not graded: " + details[0] if info["skipped"] else f"Task {'completed' if score >= 1.0 else 'failed'}."
        )
        return StepResult(self._obs, score, True, info)

    def _render(self, problem: str | None = None) -> str:
        assert self.task is not None or problem is None
        view = self._browser.observe()
        tabs = "\n".join(
            f"Tab {i}{' (current)' if i == view.active else ''}: {title}" for i, title in enumerate(view.tabs)
        )
        budget, used, kept = self.max_obs_tokens * 4, 0, []
        for line in view.tree:
            used += len(line) + 1
            if used > budget:
                break
            kept.append(line)
        tree = "\n".join(kept)
        if len(kept) < len(view.tree):
            tree += f"\n... ({len(view.tree) - len(kept)} more lines cut to fit {self.max_obs_tokens} tokens)"
        intent = self.task["intent"] if self.task else ""
        text = (
            f"OBSERVATION:\n{tabs}\n\n{tree}\nURL: {view.url}\nOBJECTIVE: {intent}\nPREVIOUS ACTION: {self._previous}"
        )
        return f"INVALID ACTION: {problem}\n\n{text}" if problem else text
