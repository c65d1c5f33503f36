"""``python -m marchdb``: the ``marchdb`` command."""

from .entry import main

main()
