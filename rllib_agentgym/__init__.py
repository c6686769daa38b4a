"""rllib-agentgym: multi-turn RL for LLM agents on Ray RLlib (AgentGym-RL).

Importing the package registers, with Ray Tune, the trainables (GRPO, ...)
and the env names `agentgym/<family>`, so the classic YAML (`run: GRPO`,
`env: agentgym/textcraft`) resolves.
"""

__version__ = "0.1.0"

TRAINABLES = ("GRPO", "AgentPPO", "AgentSFT", "MultiAgentGRPO")


def registered() -> bool:
    """Whether Tune's registry holds our names now: a `ray.shutdown()` drops every name
    registered before it (the next cluster's store starts empty)."""
    from ray.tune.registry import ENV_CREATOR, TRAINABLE_CLASS, _global_registry

    return all(_global_registry.contains(TRAINABLE_CLASS, name) for name in TRAINABLES) and \
        _global_registry.contains(ENV_CREATOR, "agentgym/textcraft")


def register() -> None:
    """Register trainables and envs with Ray Tune (idempotent; again after a `ray.shutdown()`)."""
    if registered():
        return
    from ray.tune.registry import register_trainable

    from rllib_agentgym.algorithms.grpo.grpo import GRPO, AgentPPO
    from rllib_agentgym.algorithms.grpo.multi_agent import MultiAgentGRPO
    from rllib_agentgym.algorithms.sft.sft import AgentSFT
    from rllib_agentgym.envs.multiagent_env import register_multiagent_envs
    from rllib_agentgym.envs.registry import register_envs

    for name, trainable in zip(TRAINABLES, (GRPO, AgentPPO, AgentSFT, MultiAgentGRPO), strict=True):
        register_trainable(name, trainable)
    register_envs()
    register_multiagent_envs()


register()
