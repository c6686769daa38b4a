"""Client spec of the one-step vowel bandit (a correctness check of the RL update)."""

from rllib_agentgym.envs.spec import EnvSpec

SPEC = EnvSpec(
    name="bandit",
    env_class="envs.bandit.env:BanditEnv",
    server_module="envs.bandit",
    instruction="Answer the task. Your whole reply is scored.",
    send_raw_text=True,
    accept_truncated=True,  # the whole reply is the action, however long
    default_max_new_tokens=8,
)
