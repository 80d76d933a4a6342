"""Agent collectors: one module each, registered in :mod:`agent.collectors.registry`."""
