"""The wire contract of ranksight, and nothing else.

Public surface:
- :mod:`schemas.subjects`: the one helper that builds and parses subjects.
- :mod:`schemas.envelope`: the event envelope.
- :mod:`schemas.records`: one record struct per event kind (``RECORD_KINDS``).
- :mod:`schemas.alerts`: the alert payload.
- :mod:`schemas.api`: the one query response shape.
- :mod:`schemas.codec`: the only msgpack user; writes and reads both record forms (compact columns, maps);
  ``decode_event`` raises :class:`schemas.codec.DecodeError`; ``decode_columns`` also hands on a compact batch's
  columns as it read them (what the store writes).
- :mod:`schemas.structs`: plain values and JSON from records (``to_builtins``, ``to_json``).
"""
