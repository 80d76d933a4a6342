"""The Inspector collector: tail the profiler plugin's JSONL dump files (design §4 "inspector")."""
