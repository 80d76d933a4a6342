"""The query API as its callers see it: the endpoint declarations (names, parameters, response presentation), the
client that asks a running aggregator over NATS, and the ``ranksight`` query commands. Light on purpose: nothing here
imports the aggregator, DuckDB, pyarrow or numpy; the aggregator binds its handlers to these declarations."""
