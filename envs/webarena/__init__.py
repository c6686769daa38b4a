"""WebArena: a real Chromium (Playwright) on WebArena tasks, against embedded sites or a WebArena deployment.

Modules: env (the env contract), browser (Chromium + CDP accessibility tree),
axtree (tree -> text), actions (WebArena's action space), evaluators
(string_match / url_match / program_html), tasks (WebArena config files,
splits, site URLs), sites (the embedded shop, forum and code host),
taskgen (writes tasks/ from the sites' seed data), expert (scripted agents),
server (HTTP app).
"""

from envs.webarena.env import WebArenaEnv

__all__ = ["WebArenaEnv"]
