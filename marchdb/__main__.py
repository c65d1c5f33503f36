"""``python -m marchdb``: the ``marchdb`` command."""

from marchdb.cli.entry import main

main()
