"""`python -m envs.textcraft --port N` serves TextCraft (`--port 0` picks a free port)."""

from envs.common.cli import serve
from envs.textcraft.server import create_app

serve(create_app, "textcraft")
