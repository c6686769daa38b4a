"""`python -m envs.babyai --port N` serves BabyAI over HTTP (AgentGym protocol)."""

from envs.babyai.server import create_app
from envs.common.cli import serve

if __name__ == "__main__":
    serve(create_app, "babyai")
