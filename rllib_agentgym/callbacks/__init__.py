"""RLlib callbacks: ScalingInter-RL's horizon schedule."""

from rllib_agentgym.callbacks.scaling_inter import HorizonSchedule, ScalingInterCallback

__all__ = ["HorizonSchedule", "ScalingInterCallback"]
