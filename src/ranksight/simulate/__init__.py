"""Simulators that produce the real on-disk or on-wire formats, for tests, benchmarks and ``ranksight demo``."""
