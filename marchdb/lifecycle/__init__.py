"""A memory's life after the first save: quick capture, imports, and forgetting on request."""
