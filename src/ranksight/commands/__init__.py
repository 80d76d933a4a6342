"""The top-level commands that start several components at once (up, demo) or gather theirs (parse, probe)."""
