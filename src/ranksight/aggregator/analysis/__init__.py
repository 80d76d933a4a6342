"""Analysis: the alert rules over live state (one module per area; ``rules.default_rules()`` lists them). Live state
itself is in ``aggregator.state``; the pure models it feeds (straggler engine, hang finder) in ``aggregator.models``."""
