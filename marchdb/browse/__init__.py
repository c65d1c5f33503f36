"""``marchdb browse``: Datasette over the index, read-only, on 127.0.0.1."""
