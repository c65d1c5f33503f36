"""The SQLite index: the schema, sync from the files, vectors, recall and the SQL functions."""
