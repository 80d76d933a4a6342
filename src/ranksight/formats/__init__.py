"""The formats the node-side tools write, parsed: pure parsers (bytes or lines in, typed wire records out) that the
agent and the aggregator both read with. Above the wire contract and shared ground, below both processes."""
