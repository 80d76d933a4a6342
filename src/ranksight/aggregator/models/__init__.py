"""Pure models below live state: the straggler engine (``straggler``), the engine process that runs it per cluster
(``engines``), the hang finder (``hangs``) and robust statistics. Fed records, asked with a clock; no I/O, and nothing
of live state, the rules or the store: ``state`` feeds them and the rules in ``analysis`` read what they find."""
