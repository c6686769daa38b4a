"""`python -m rllib_agentgym.prepare`: build the cached assets a first run needs.

Builds the embedded model (tokenizer + Qwen2 weights) into the cache dir
($RLLIB_AGENTGYM_CACHE or ~/.cache/rllib_agentgym) and prints where it is.
"""

from __future__ import annotations

from rllib_agentgym.core.embedded import embedded_model_path


def main() -> None:
    print(f"embedded model: {embedded_model_path()}")


if __name__ == "__main__":
    main()
