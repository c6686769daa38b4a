"""`python -m envs.sciworld --port N`: serve SciWorld over HTTP."""

from envs.common.cli import serve
from envs.sciworld.server import create_app

serve(create_app, "sciworld")
