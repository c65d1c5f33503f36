"""marchdb: a local memory engine for AI agents."""

__version__ = "0.1.0"
