"""Look at a dataset: :func:`show` draws samples and batches (exported as ``shardkit.show``)."""

from shardkit.viz.grid import class_colour, show

__all__ = ["class_colour", "show"]
