"""One `EnvSpec` per env family (`specs/<name>.py` defines `SPEC`)."""
