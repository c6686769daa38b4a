"""Torch learner of AgentSFT."""
