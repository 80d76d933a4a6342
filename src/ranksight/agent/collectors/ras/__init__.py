"""RCCL/NCCL RAS: async client, pure parsers (text status, JSON status, MONITOR), a faithful fake server, the collector."""
