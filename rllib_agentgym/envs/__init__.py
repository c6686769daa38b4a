"""Client side of the env families: specs, HTTP / in-process clients, gymnasium view."""
