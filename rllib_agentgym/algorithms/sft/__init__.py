"""AgentSFT: behaviour cloning of expert conversations, with the RL policy's module and masks."""
