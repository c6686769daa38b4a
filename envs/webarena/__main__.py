"""`python -m envs.webarena --port N`: serve the WebArena env (and its embedded sites) over HTTP."""

from envs.common.cli import serve
from envs.webarena.server import create_app

serve(create_app, "webarena")
