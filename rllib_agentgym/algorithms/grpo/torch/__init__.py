"""Torch-specific parts of GRPO (the learner)."""
