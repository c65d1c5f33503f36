"""What an agent host runs for a hook: ``python -I -S …/marchdb/cli/launch.py hook HOST``.

A host starts a new process for every prompt, and ``site`` (the venv's
``.pth`` files, an editable install's finder) is most of what a bare Python
start costs. A hook's warm answer needs only the standard library and this
package, so the command ``marchdb install`` writes starts Python without
``site`` and isolated: with ``-I`` neither the session's folder (a project
the user opened, perhaps a stranger's) nor a ``PYTHON*`` variable can put a
module ahead of the standard library's or ours. This file then puts the
folder holding ``marchdb`` on the path itself, after the standard library.

Whatever needs the rest of the environment (the index and its extensions,
the CLI framework) calls ``hosts.full_environment()`` first.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    import os

    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.argv[0] = "marchdb"
    from marchdb.cli.entry import main

    main()
