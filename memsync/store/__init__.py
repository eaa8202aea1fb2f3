"""The index's store: the reader's and writer's protocols, the tables both engines share, SQLite and PostgreSQL, where an index is and who may write it."""
