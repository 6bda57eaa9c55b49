"""Random access into a converted split (:func:`open_dataset`, exported as ``shardkit.open``)."""

from shardkit.access.dataset import MAX_INDEXES, OpenDataset, open_dataset

__all__ = ["MAX_INDEXES", "OpenDataset", "open_dataset"]
