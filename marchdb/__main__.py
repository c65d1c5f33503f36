"""``python -m marchdb`` runs the CLI."""

from .cli import main

main()
