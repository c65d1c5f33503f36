"""The ``marchdb`` command line: a fast entry point, the typer app and its commands."""
