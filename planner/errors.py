"""The planner's user-facing error: a bad input, named by file and field."""

from __future__ import annotations

__all__ = ["TopologyError"]


class TopologyError(ValueError):
    """An input the planner cannot plan from. ``deepinfer-compile`` prints it and exits 2.

    Args:
        source: the file at fault (``topology.yaml``, a load-statistics JSON, a ``config.json``).
        field: the dotted field inside it, e.g. ``parallel.ep`` (``""`` for the whole file).
        message: what was found and what was expected (allowed values, limits, both numbers).
    """

    def __init__(self, source: str, field: str, message: str):
        self.source = source
        self.field = field
        self.message = message
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {message}")
