"""Shared ground of every floor above the wire contract: settings, NATS, asyncio helpers, redaction, command-line
helpers (the exception tree, beneath everything, is :mod:`ranksight.errors`)."""
