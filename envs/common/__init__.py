"""Shared pieces of the env servers: the env contract and the HTTP app factory."""

from envs.common.env import StepResult, TextEnv

__all__ = ["StepResult", "TextEnv"]
