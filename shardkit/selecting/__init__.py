"""Selections of a split's samples: :func:`select` (exported as ``shardkit.select``) chooses samples by class,
lists of keys or paths and a ``where`` predicate over the per-sample table, and writes the selection folder that
every reader takes wherever it takes a split (:mod:`shardkit.format.snapshot.selection`)."""

from shardkit.selecting.rows import SelectError
from shardkit.selecting.take import Selected, select
from shardkit.selecting.where import WhereError

__all__ = ["SelectError", "Selected", "WhereError", "select"]
