"""Agent collectors: one module each, each registers itself (:mod:`agent.collectors.registry`)."""
