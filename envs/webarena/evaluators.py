"""WebArena's evaluators: string_match, url_match and program_html, with WebArena's matching rules.

A task's `eval.eval_types` lists the evaluators; the episode's score is the
product of their scores, so the reward is 1 only when every one passes.

- string_match compares the answer of `stop [answer]` with
  `reference_answers`: exact_match (equal after WebArena's cleaning: strip,
  drop one pair of surrounding quotes, lowercase), must_include (every
  reference is a substring; a lone one-character reference must be a whole
  token), fuzzy_match (an LLM judge says the answer means the reference; the
  literal "N/A" is matched exactly, and a judge may still accept a
  not-achievable answer that explains why).
- url_match: the final URL against `reference_url` (alternatives split by
  " |OR| "), "GOLD in PRED": a reference's host+path is a substring of the
  final URL's and each of its query values appears in the final URL's query.
- program_html: for each `{url, locator, required_contents}` opens `url` in
  a scratch tab of the session's browser context (`last`: the agent's current
  tab), evaluates the JavaScript `locator` (empty: the page's HTML) and checks
  `required_contents` (exact_match, or must_include with " |OR| "
  alternatives). WebArena's site-specific `func:` helpers are not
  implemented: such a task raises `Unsupported` (not graded: the env skips
  and counts it, and tasks.skip_reason leaves it out of the splits).

The judge is any OpenAI-compatible chat endpoint (`Judge`), configured by the
env options judge_url / judge_model / judge_api_key or the environment
variables WEBARENA_JUDGE_URL / WEBARENA_JUDGE_MODEL / WEBARENA_JUDGE_API_KEY.
"""

from __future__ import annotations

import html
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import httpx

_TOKEN = re.compile(r"\w+|[^\w\s]")


class PageReader(Protocol):
    """What program_html needs from the browser (see browser.BrowserSession)."""

    def evaluate(self, url: str | None, expression: str) -> Any: ...

    def content(self, url: str | None) -> str: ...


def clean_answer(text: str) -> str:
    text = str(text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(ref) == clean_answer(pred))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(ref) == 1 and len(_TOKEN.findall(ref)) == 1:
        return float(ref in _TOKEN.findall(pred))
    return float(ref in pred)


class NotGraded(Exception):
    """The task could not be graded: the episode is skipped (and counted), not failed."""


class Unsupported(NotGraded):
    """The task uses an evaluator feature this env does not implement (WebArena's func: helpers)."""


class JudgeError(NotGraded):
    """The task could not be graded: its LLM judge is missing or failed."""


class JudgeMissing(JudgeError):
    """The task needs the LLM judge and none is configured."""


@dataclass
class Judge:
    """An OpenAI-compatible chat endpoint that grades free-form answers (WebArena's fuzzy_match)."""

    url: str
    model: str = "gpt-4o-mini"
    api_key: str = ""
    timeout_s: float = 60.0

    @classmethod
    def configured(cls, url: str | None = None, model: str | None = None, api_key: str | None = None) -> Judge | None:
        url = url or os.environ.get("WEBARENA_JUDGE_URL")
        if not url:
            return None
        return cls(
            url=url,
            model=model or os.environ.get("WEBARENA_JUDGE_MODEL") or cls.model,
            api_key=api_key or os.environ.get("WEBARENA_JUDGE_API_KEY", ""),
        )

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        if base.endswith("/chat/completions"):
            return base
        return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")

    def ask(self, prompt: str) -> str:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            reply = httpx.post(
                self.endpoint,
                json={
                    "model": self.model,
                    "temperature": 0,
                    "max_tokens": 256,
                    "messages": [
                        {"role": "system", "content": "You are a strict and careful grader."},
                        {"role": "user", "content": prompt},
                    ],
                },
                headers=headers,
                timeout=self.timeout_s,
            )
            reply.raise_for_status()
            return str(reply.json()["choices"][0]["message"]["content"])
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"the LLM judge at {self.endpoint} failed: {exc}") from None

    def same_meaning(self, question: str, reference: str, answer: str) -> bool:
        verdict = self.ask(
            "Grade a student's answer to a question against the reference answer. Different wording is fine; "
            "the answer must mean the same as the reference. 'N/A' means the task cannot be done.\n"
            f"Question: {question}\nReference answer: {reference}\nStudent answer: {answer}\n"
            "End with one verdict: correct, incorrect or partially correct."
        ).lower()
        return "correct" in verdict and "incorrect" not in verdict and "partially correct" not in verdict

    def explains_unachievable(self, question: str, reason: str, answer: str) -> bool:
        verdict = self.ask(
            "A task cannot be completed. Decide whether the given answer reports that it cannot be done for the "
            f"same reason as the reference.\nTask: {question}\nReference reason: {reason}\nAnswer: {answer}\n"
            "Reply with one word: same or different."
        ).lower()
        return "same" in verdict and "different" not in verdict


@dataclass
class Evaluation:
    score: float
    details: list[str] = field(default_factory=list)


def string_match(task: Mapping[str, Any], answer: str, judge: Judge | None) -> Evaluation:
    refs = task["eval"].get("reference_answers") or {}
    score, details = 1.0, []
    for approach, value in refs.items():
        if approach == "exact_match":
            s = exact_match(value, answer)
        elif approach == "must_include":
            values = value if isinstance(value, list) else [value]
            s = 1.0
            for ref in values:
                s *= must_include(ref, answer, tokenize=len(values) == 1)
        elif approach == "fuzzy_match":
            s = _fuzzy(task, value, answer, judge)
        else:
            raise ValueError(f"unknown string_match approach {approach!r}")
        details.append(f"string_match.{approach}: {s:g}")
        score *= s
    return Evaluation(score, details)


def _fuzzy(task: Mapping[str, Any], value: Any, answer: str, judge: Judge | None) -> float:
    if value == "N/A":
        if exact_match("N/A", answer):
            return 1.0
        reason = task["eval"].get("string_note", "")
        return float(judge is not None and bool(reason) and judge.explains_unachievable(task["intent"], reason, answer))
    if judge is None:
        raise JudgeMissing("fuzzy_match needs an LLM judge: set WEBARENA_JUDGE_URL (or the judge_url env option)")
    refs = value if isinstance(value, list) else [value]
    return float(all(judge.same_meaning(task["intent"], ref, answer) for ref in refs))


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parsed = urllib.parse.urlparse(url.rstrip("/"))
    return parsed.netloc + parsed.path.rstrip("/"), urllib.parse.parse_qs(parsed.query)


def url_match(task: Mapping[str, Any], final_url: str) -> Evaluation:
    ev = task["eval"]
    rule = ev.get("url_note", "GOLD in PRED")
    if rule != "GOLD in PRED":
        raise ValueError(f"unknown url_note {rule!r}")
    pred_path, pred_query = _split_url(final_url)
    for ref in str(ev.get("reference_url", "")).split(" |OR| "):
        ref_path, ref_query = _split_url(ref.strip())
        if ref_path in pred_path and all(
            any(v in pred_query.get(k, []) for v in values) for k, values in ref_query.items()
        ):
            return Evaluation(1.0, [f"url_match: 1 ({final_url} matches {ref.strip()})"])
    return Evaluation(0.0, [f"url_match: 0 ({final_url} vs {ev.get('reference_url')})"])


def program_html(task: Mapping[str, Any], page: PageReader) -> Evaluation:
    score, details = 1.0, []
    for n, target in enumerate(task["eval"].get("program_html") or []):
        url, locator = str(target.get("url", "last")), str(target.get("locator", "")).strip()
        if url.startswith("func:") or locator.startswith("func:"):
            raise Unsupported(f"program_html[{n}] uses WebArena's func: helpers, which this env does not implement")
        where = None if url == "last" else url
        try:
            selected = page.content(where) if not locator else page.evaluate(where, locator)
        except Exception as exc:  # a missing element makes the locator throw: WebArena reads that as ""
            selected, why = "", str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            details.append(f"program_html[{n}]: locator failed ({why})")
        selected = html.unescape(str(selected or ""))
        required = target.get("required_contents")
        if isinstance(required, list):  # WebArena's older format: a must_include list
            required = {"must_include": required}
        if "exact_match" in required:
            s = exact_match(required["exact_match"], selected)
        else:
            s = float(
                all(
                    any(must_include(alt, selected) for alt in str(content).split(" |OR| "))
                    for content in required.get("must_include", [])
                )
            )
        details.append(f"program_html[{n}]: {s:g} ({url} {locator or '<html>'})")
        score *= s
    return Evaluation(score, details)


def evaluate(task: Mapping[str, Any], answer: str, final_url: str, page: PageReader, judge: Judge | None) -> Evaluation:
    """Run every evaluator of the (placeholder-resolved) task; raises NotGraded when it cannot be graded
    (JudgeError: fuzzy_match without a working judge; Unsupported: func: helpers)."""
    score, details = 1.0, []
    for kind in task["eval"].get("eval_types") or ():
        if kind == "string_match":
            result = string_match(task, answer, judge)
        elif kind == "url_match":
            result = url_match(task, final_url)
        elif kind == "program_html":
            result = program_html(task, page)
        else:
            raise ValueError(f"unknown eval type {kind!r}")
        score *= result.score
        details += result.details
    return Evaluation(score, details)
