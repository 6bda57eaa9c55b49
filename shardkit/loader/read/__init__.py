"""The read path: from a worker's planned blocks to the byte ranges it asks the store for.

``ranges.py`` is the read schedule as pure functions (which byte ranges a block read sends; ``shardkit simulate``
replays the same functions), ``blocks.py`` the :class:`~shardkit.loader.read.blocks.BlockReader` that reads one
source's blocks through the sample index (or the tar header walk) and checks every sample, ``reader.py`` the
:class:`~shardkit.loader.read.reader.MixReader` over a mixture's sources and the read-ahead thread, and
``stored.py`` the map from planned positions to stored ones (a selection's or a corrected split's subset).
"""
