"""Chromium driven through Playwright's async API, from synchronous env code.

One `BrowserRuntime` per process owns an asyncio event loop in a daemon
thread; Playwright, the Chromium process and every page live on that loop.
The env server calls env methods from a thread pool, so `BrowserSession`
methods are synchronous: each submits a coroutine to the loop and waits for
it. Sessions interleave on the loop at every await, so many sessions share
one browser without one Playwright per thread.

Chromium is launched lazily when the first session opens and shut down (with
Playwright's driver) when the last one closes, so no browser process outlives
its sessions. Each session has its own browser context (cookies, tabs,
history), recreated at every task reset.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from playwright.async_api import Browser, BrowserContext, CDPSession, Page, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from envs.webarena.actions import Action
from envs.webarena.axtree import AXSnapshot, render

CHROMIUM = os.environ.get("WEBARENA_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
# After a click, a typed Enter or a key press (and a renderer round trip), how long to give a
# navigation the action may have started to show up as a request event before observing the page.
_NAV_START_S = 0.01

T = TypeVar("T")

_TEXT_FIELD_JS = """function() {
  const el = this.nodeType === Node.TEXT_NODE ? this.parentElement : this;
  if (!el) return 'other';
  if (el.tagName === 'SELECT') return 'select';
  const inputTypes = ['checkbox', 'radio', 'submit', 'button', 'hidden', 'image', 'reset', 'file', 'range', 'color'];
  if (el.tagName === 'TEXTAREA' || (el.tagName === 'INPUT' && !inputTypes.includes(el.type))) {
    el.focus(); el.select(); return 'text';
  }
  if (el.isContentEditable) {
    el.focus(); document.getSelection().selectAllChildren(el); return 'text';
  }
  return 'other';
}"""

_SELECT_OPTION_JS = """function(wanted) {
  const el = this;
  const norm = s => s.trim().toLowerCase();
  const options = Array.from(el.options);
  const hit = options.find(o => norm(o.text) === norm(wanted) || norm(o.value) === norm(wanted));
  if (!hit) return options.map(o => o.text.trim());
  el.value = hit.value;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return null;
}"""


class ElementError(Exception):
    """An action refers to an element or tab it cannot act on; the message is shown to the agent."""


@dataclass
class PageView:
    """What the agent sees of the browser: the active tab's AX tree, its URL and the open tabs."""

    tree: list[str]
    url: str
    tabs: list[str]
    active: int


class BrowserRuntime:
    """The event-loop thread, Playwright and the shared Chromium (launched for the first user)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webarena-browser", daemon=True)
        self._thread.start()
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._users = 0
        self._lock = asyncio.Lock()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the browser loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def acquire(self) -> None:
        """Count a user in (launching Chromium for the first)."""
        async with self._lock:
            self._users += 1
            await self._ensure_browser()

    async def browser(self) -> Browser:
        """The shared browser; relaunched if Chromium died under a user."""
        async with self._lock:
            return await self._ensure_browser()

    async def _ensure_browser(self) -> Browser:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        if self._browser is None or not self._browser.is_connected():
            self._browser = await self._playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
            )
        return self._browser

    async def release(self) -> None:
        """Count a user out; the last one shuts Chromium and Playwright's driver down."""
        async with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            browser, playwright = self._browser, self._playwright
            self._browser = self._playwright = None
            try:
                if browser is not None:
                    await browser.close()
            finally:
                if playwright is not None:
                    await playwright.stop()


_runtime_lock = threading.Lock()
_runtime: BrowserRuntime | None = None


def runtime() -> BrowserRuntime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = BrowserRuntime()
        return _runtime


class BrowserSession:
    """One env session's browser context and tabs; every method blocks until the browser is done.

    `timeout_ms` bounds each Playwright operation (navigation, load waits). With `viewport_only`
    the observation keeps only the elements on screen (WebArena's current_viewport_only), so
    scrolling changes what the agent sees.
    """

    def __init__(self, viewport: tuple[int, int] = (1280, 720), timeout_ms: int = 15000, viewport_only: bool = False):
        self._rt = runtime()
        self._viewport_only = viewport_only
        self._viewport = {"width": viewport[0], "height": viewport[1]}
        self._timeout_ms = timeout_ms
        self._acquired = False
        self._context: BrowserContext | None = None
        self._pages: list[Page] = []
        self._active = 0
        self._cdp: dict[Page, CDPSession] = {}
        self._loaded: dict[Page, asyncio.Event] = {}
        self._may_navigate = False  # the last action may have started a navigation
        self.snapshot = AXSnapshot(lines=[])

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._rt.run(coro, timeout=self._timeout_ms / 1000 * 4 + 30)

    # -- lifecycle -------------------------------------------------------

    def start(self, cookies: list[dict[str, Any]], storage_state: str | None = None) -> None:
        """A fresh context (closing the previous one) with one blank tab."""
        self._run(self._start(cookies, storage_state))

    async def _start(self, cookies: list[dict[str, Any]], storage_state: str | None) -> None:
        if not self._acquired:
            await self._rt.acquire()
            self._acquired = True
        if self._context is not None:
            try:
                await self._context.close()
            except PlaywrightError:
                pass  # its browser is gone
        self._pages, self._cdp, self._loaded, self._active = [], {}, {}, 0
        browser = await self._rt.browser()
        self._context = await browser.new_context(viewport=self._viewport, storage_state=storage_state)
        self._context.set_default_timeout(self._timeout_ms)
        self._context.on("page", self._adopt)
        if cookies:
            await self._context.add_cookies(cookies)
        self._adopt(await self._context.new_page())

    def _adopt(self, page: Page) -> None:
        """Track a new tab (opened by us or by the page, e.g. target=_blank) and make it active."""
        if page in self._loaded or page.is_closed():
            return
        loaded = asyncio.Event()
        loaded.set()
        self._loaded[page] = loaded

        def on_request(request: Any) -> None:
            if request.is_navigation_request() and request.frame == page.main_frame:
                loaded.clear()

        page.on("request", on_request)
        page.on("load", lambda _: loaded.set())
        page.on("requestfailed", lambda r: loaded.set() if r.is_navigation_request() else None)
        page.on("close", lambda _: self._forget(page))
        self._pages.append(page)
        self._active = len(self._pages) - 1

    def _forget(self, page: Page) -> None:
        if page in self._pages:
            idx = self._pages.index(page)
            self._pages.remove(page)
            if self._active >= idx:
                self._active = max(0, self._active - 1)
        self._cdp.pop(page, None)
        self._loaded.pop(page, None)

    def close(self) -> None:
        """Close the context; the last session to close shuts Chromium down. Idempotent."""
        if self._acquired:
            self._run(self._close())

    async def _close(self) -> None:
        context, self._context, self._pages, self._cdp, self._loaded = self._context, None, [], {}, {}
        self._acquired = False
        try:
            if context is not None:
                await context.close()
        except PlaywrightError:
            pass  # its browser is gone
        finally:
            await self._rt.release()

    # -- reading ---------------------------------------------------------

    @property
    def page(self) -> Page:
        return self._pages[self._active]

    def goto(self, url: str) -> None:
        self._run(self._goto(self.page, url))

    async def _goto(self, page: Page, url: str) -> None:
        try:
            await page.goto(url, wait_until="load")
        except PlaywrightError as exc:
            raise ElementError(f"could not open {url}: {str(exc).splitlines()[0]}") from None

    def observe(self) -> PageView:
        """Snapshot the active tab's accessibility tree; ids in it are valid for the next action."""
        return self._run(self._observe())

    async def _cdp_of(self, page: Page) -> CDPSession:
        if page not in self._cdp:
            assert self._context is not None
            self._cdp[page] = await self._context.new_cdp_session(page)
        return self._cdp[page]

    async def _observe(self) -> PageView:
        page = self.page
        if self._may_navigate:
            await self._settle(page)
            self._may_navigate = False
        try:
            cdp = await self._cdp_of(page)
            nodes = (await cdp.send("Accessibility.getFullAXTree"))["nodes"]
        except PlaywrightError:  # the page's renderer was swapped: reattach once
            self._cdp.pop(page, None)
            cdp = await self._cdp_of(page)
            nodes = (await cdp.send("Accessibility.getFullAXTree"))["nodes"]
        self.snapshot = render(nodes, await self._in_view(cdp) if self._viewport_only else None)
        tabs = []
        for p in self._pages:
            # The active tab's title is its root's name; other tabs cost a round trip each.
            title = self.snapshot.root_name if p is page else await self._title(p)
            tabs.append(title or p.url)
        return PageView(tree=self.snapshot.lines, url=page.url, tabs=tabs, active=self._active)

    async def _in_view(self, cdp: CDPSession) -> Callable[[int], bool | None]:
        """backend id -> whether its layout box meets the viewport (None: no box), from one DOM snapshot."""
        doc = (await cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []}))["documents"][0]
        backend = doc["nodes"]["backendNodeId"]
        left, top = doc.get("scrollOffsetX", 0), doc.get("scrollOffsetY", 0)
        right, bottom = left + self._viewport["width"], top + self._viewport["height"]
        boxes = {backend[i]: box for i, box in zip(doc["layout"]["nodeIndex"], doc["layout"]["bounds"])}

        def in_view(backend_id: int) -> bool | None:
            box = boxes.get(backend_id)
            if box is None:
                return None
            x, y, w, h = box
            return x < right and x + w > left and y < bottom and y + h > top

        return in_view

    @staticmethod
    async def _title(page: Page) -> str:
        try:
            return await page.title()
        except PlaywrightError:
            return ""

    def evaluate(self, url: str | None, expression: str) -> Any:
        """Evaluate a JS expression on `url` opened in a scratch tab (None: on the active tab)."""
        return self._run(self._read(url, lambda page: page.evaluate(f"() => {expression}")))

    def content(self, url: str | None) -> str:
        """The HTML of `url` (None: the active tab), as WebArena's program_html reads an empty locator."""
        return self._run(self._read(url, lambda page: page.content()))

    async def _read(self, url: str | None, read: Callable[[Page], Awaitable[T]]) -> T:
        if url is None:
            if self._may_navigate:
                await self._settle(self.page)
            return await read(self.page)
        assert self._context is not None
        active = self._active
        page = await self._context.new_page()
        self._adopt(page)
        try:
            await self._goto(page, url)
            return await read(page)
        finally:
            await page.close()
            self._forget(page)
            self._active = min(active, len(self._pages) - 1)

    # -- acting ----------------------------------------------------------

    def execute(self, action: Action) -> None:
        """Perform a browser action (everything but `stop`); raises ElementError when it cannot be done."""
        try:
            self._run(self._execute(action))
        except PlaywrightError as exc:  # e.g. a page that stopped responding
            raise ElementError(f"the browser could not do '{action}': {str(exc).splitlines()[0]}") from None

    async def _settle(self, page: Page) -> None:
        """Wait for a navigation the last action started (if any) to finish loading.

        A round trip through the renderer (two task turns) lets a click's or a key's default
        action run, so a navigation it starts has announced its request by the time the short
        wait below ends; then wait for that document's load event.
        """
        try:
            await page.evaluate("() => new Promise(r => setTimeout(() => setTimeout(r, 0), 0))")
        except PlaywrightError:
            pass  # the document went away mid-call: a navigation is under way
        await asyncio.sleep(_NAV_START_S)
        loaded = self._loaded.get(page)
        if loaded is not None and not loaded.is_set():
            try:
                await asyncio.wait_for(loaded.wait(), self._timeout_ms / 1000)
            except asyncio.TimeoutError:
                pass  # observe whatever is there; the agent can wait or retry

    async def _execute(self, action: Action) -> None:
        page, kind = self.page, action.kind
        self._may_navigate = kind in ("click", "type", "press")
        if kind == "click":
            x, y = await self._center(page, action.element)
            await page.mouse.click(x, y)
        elif kind == "hover":
            x, y = await self._center(page, action.element)
            await page.mouse.move(x, y)
        elif kind == "type":
            await self._type(page, action)
        elif kind == "press":
            try:
                await page.keyboard.press(action.text)
            except PlaywrightError:
                raise ElementError(f"unknown key combination '{action.text}'") from None
        elif kind == "scroll":  # one screen, as WebArena scrolls
            sign = 1 if action.text == "down" else -1
            await page.evaluate(f"() => window.scrollBy(0, {sign} * window.innerHeight)")
        elif kind == "new_tab":
            assert self._context is not None
            self._adopt(await self._context.new_page())
        elif kind == "tab_focus":
            if not 0 <= action.index < len(self._pages):
                raise ElementError(f"there is no tab {action.index}; open tabs are 0 to {len(self._pages) - 1}")
            self._active = action.index
            await self.page.bring_to_front()
        elif kind == "close_tab":
            await page.close()
            self._forget(page)
            if not self._pages:
                assert self._context is not None
                self._adopt(await self._context.new_page())
            self._active = len(self._pages) - 1
            await self.page.bring_to_front()
        elif kind == "goto":
            await self._goto(page, action.text)
        elif kind in ("go_back", "go_forward"):
            try:
                await (page.go_back() if kind == "go_back" else page.go_forward())
            except PlaywrightError as exc:
                raise ElementError(f"{kind} failed: {str(exc).splitlines()[0]}") from None
        else:
            raise ValueError(f"not a browser action: {kind}")

    async def _center(self, page: Page, element: str) -> tuple[float, float]:
        """Viewport coordinates of the element's center, scrolling it into view first."""
        candidates = self.snapshot.backend_ids(element)
        if not candidates:
            raise ElementError(f"there is no element with id [{element}] on the current page")
        cdp = await self._cdp_of(page)
        for backend_id in candidates:
            try:
                await cdp.send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend_id})
                quads = (await cdp.send("DOM.getContentQuads", {"backendNodeId": backend_id}))["quads"]
            except PlaywrightError:
                continue
            if quads:
                q = quads[0]
                return (q[0] + q[2] + q[4] + q[6]) / 4, (q[1] + q[3] + q[5] + q[7]) / 4
        raise ElementError(f"element [{element}] is not visible on the page, so it cannot be used")

    async def _type(self, page: Page, action: Action) -> None:
        x, y = await self._center(page, action.element)
        cdp = await self._cdp_of(page)
        backend_id = self.snapshot.backend_ids(action.element)[0]
        obj = (await cdp.send("DOM.resolveNode", {"backendNodeId": backend_id}))["object"]["objectId"]

        async def call(js: str, *args: Any) -> Any:
            reply = await cdp.send(
                "Runtime.callFunctionOn",
                {
                    "objectId": obj,
                    "functionDeclaration": js,
                    "returnByValue": True,
                    "arguments": [{"value": a} for a in args],
                },
            )
            return reply["result"].get("value")

        kind = await call(_TEXT_FIELD_JS)
        if kind == "select":
            missing = await call(_SELECT_OPTION_JS, action.text)
            if missing is not None:
                raise ElementError(f"[{action.element}] has no option '{action.text}'; its options are {missing}")
        elif kind == "text":
            await page.mouse.click(x, y)
            await call(_TEXT_FIELD_JS)  # the click may move the caret: select the old text again
            if action.text:
                await page.keyboard.type(action.text)
            else:
                await page.keyboard.press("Delete")
        else:
            role = self.snapshot.role(action.element) or "element"
            raise ElementError(f"[{action.element}] is a {role}, not a text field, so it cannot be typed into")
        if action.enter:
            await page.keyboard.press("Enter")
