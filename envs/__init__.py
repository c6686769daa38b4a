"""Environment servers, one package per family (AgentGym HTTP protocol).

Nothing here imports `rllib_agentgym`: the client side knows these servers
only through the protocol, or through the in-process adapter that calls the
same env classes.
"""
