"""A one-step text bandit: a correctness check of the whole RL update.

The agent is asked for a reply made of vowels; the reward is the fraction of
the reply's letters that are vowels. A random-init model already gets a
spread of rewards inside each group, so GRPO has a signal from iteration one
and its effect shows within a few updates on a CPU (tests/test_learning.py).
"""

from envs.bandit.env import BanditEnv

__all__ = ["BanditEnv"]
