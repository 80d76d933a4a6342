"""SQL migrations, applied in name order, each once (``schema_migrations``), by ``Store.migrate``.

Only additive migrations are written: a table, a view, a column (nullable or with a default), an index. The files up to
``0920`` are the history every database created so far has applied and are never edited; some of them rebuild tables
(written when every database was empty). Record-kind tables need no migration: the store creates them and adds the
columns of new fields from the models (``aggregator.columns.table_columns``). ``tests/unit/test_migrations.py`` holds
the history's digests, rejects destructive statements in later files, and upgrades a database the previous release
wrote (``fixtures/duckdb``) asserting that no row is lost. A migration is known by its whole file name: the two files
numbered ``0930`` are two migrations that databases applied under those names, so neither is renumbered; a new file takes
a number of its own.
"""
