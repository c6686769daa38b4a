"""Conversation data: expert trajectories and their token-level form for SFT."""
