"""rllib-agentgym: multi-turn RL for LLM agents on Ray RLlib (AgentGym-RL).

Importing the package registers, with Ray Tune, the trainables (GRPO, ...)
and the env names `agentgym/<family>`, so the classic YAML (`run: GRPO`,
`env: agentgym/textcraft`) resolves.
"""

__version__ = "0.1.0"

_REGISTERED = False


def register() -> None:
    """Register trainables and envs with Ray Tune (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from ray.tune.registry import register_trainable

    from rllib_agentgym.algorithms.grpo.grpo import GRPO, AgentPPO
    from rllib_agentgym.algorithms.grpo.multi_agent import MultiAgentGRPO
    from rllib_agentgym.algorithms.sft.sft import AgentSFT
    from rllib_agentgym.envs.multiagent_env import register_multiagent_envs
    from rllib_agentgym.envs.registry import register_envs

    register_trainable("GRPO", GRPO)
    register_trainable("AgentPPO", AgentPPO)
    register_trainable("AgentSFT", AgentSFT)
    register_trainable("MultiAgentGRPO", MultiAgentGRPO)
    register_envs()
    register_multiagent_envs()
    _REGISTERED = True


register()
