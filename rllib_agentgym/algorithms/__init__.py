"""Training algorithms for LLM agents on RLlib's new API stack.

`advantages` and `losses` hold the math as pure functions over torch tensors
(no Ray, no model), shared by every trainable; each algorithm lives in its
own subpackage (config, Algorithm, learner), like RLlib's own `ppo/`.
"""
