"""The marchdb store: one object an agent, the CLI or the MCP server holds.

It returns data (dicts, dataclasses); formatting lives in ``cli`` and ``mcp``.
Each operation of ``ops`` is a method of ``Store`` (checked against the table
by ``ops.checks``), kept by what it does: ``reading`` (status, doctor, open,
search, SQL), ``recalling`` (recall, a host's hook, context) and ``writing``
(save, remember, log, import, maintain, the working page). The plumbing under
them (the index, the model, syncs) is ``index.keeper.Keeper``.
"""

from __future__ import annotations

from marchdb.store.reading import Reading
from marchdb.store.writing import Writing


class Store(Writing, Reading):
    """A memory vault and its index.

    ``Store()`` resolves the configuration the usual way (flags, environment,
    config.json); pass ``home=``, ``root=``, ``model=`` to override.

    ``keep_vectors``: whether recall searches a copy of the vectors held in
    this process's memory (``vecindex``: ~5x faster KNN, loaded once, kept in
    step with the index) instead of the vec0 tables. ``None`` (default) turns
    it on from the second recall, so a one-shot call never pays the loading;
    long-lived processes (MCP server, watcher) pass ``True``.

    ``embedder``: an embedder already loaded elsewhere in this process to
    use instead of loading the model again.

    ``use_model=False``: never load the embedding model (recall is BM25
    only, announced; syncs leave embedding to others). A hook answering while
    the warm engine is still starting uses it: loading the model would cost
    more than the hook's time budget.
    """


__all__ = ["Store"]
