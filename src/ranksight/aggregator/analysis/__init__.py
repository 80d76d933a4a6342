"""Analysis: the alert rules over live state (one module per area; ``rules.default_rules()`` lists them) and the
engines they use (``stragglers``, ``hangs``). Live state itself is in ``aggregator.state``."""
