"""GRPO (group relative policy optimization) for multi-turn LLM agents."""
