"""`python -m rllib_agentgym.prepare [--agent]`: build the cached assets a first run needs.

Builds the embedded model (tokenizer + Qwen2 weights) into the cache dir
($RLLIB_AGENTGYM_CACHE or ~/.cache/rllib_agentgym) and prints where it is.
With `--agent`, also the embedded agent model (`model_path: embedded-agent`:
the embedded architecture trained by AgentSFT on expert conversations; about
20 minutes on 2 CPU cores, see rllib_agentgym/agent_model.py).
"""

from __future__ import annotations

import argparse

from rllib_agentgym.core.embedded import embedded_model_path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="build the embedded model(s) into the cache dir")
    parser.add_argument("--agent", action="store_true", help="also build the SFT-trained `embedded-agent` model")
    args = parser.parse_args(argv)
    print(f"embedded model: {embedded_model_path()}")
    if args.agent:
        from rllib_agentgym.agent_model import agent_model_path

        print(f"embedded agent model: {agent_model_path(build=True)}")


if __name__ == "__main__":
    main()
