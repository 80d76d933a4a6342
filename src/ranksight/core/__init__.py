"""Ground every floor of ranksight stands on: errors, settings, NATS, asyncio helpers, redaction."""
