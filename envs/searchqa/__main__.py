"""`python -m envs.searchqa --port N`: serve the Deep Search env."""

from envs.common.cli import serve
from envs.searchqa.server import create_app

serve(create_app, "searchqa")
