"""The warm engine (``marchdb serve``), its client, and the watcher that keeps an index fresh."""
