from envs.bandit.server import create_app
from envs.common.cli import serve

serve(create_app, "bandit")
