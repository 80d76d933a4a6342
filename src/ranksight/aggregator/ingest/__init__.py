"""Ingest before the writer, pure (bytes in, envelopes out): each message decoded (:mod:`schemas.codec`), admitted
(:mod:`.admission`: subject, identity, times, sizes) and sequenced (:mod:`.sequence`: duplicates, gaps, conflicts),
a batch at a time (:mod:`.pipeline`). The writer (:mod:`aggregator.store`) commits what comes out, in one transaction
with the sequence marks."""
