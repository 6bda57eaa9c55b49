"""``shardkit demo`` and ``shardkit sample-data``: sample data shardkit makes itself, and the main job run on it.

* :mod:`.spec` -- the demo's options and results (no torch import).
* :mod:`.run` -- the demo: make images, convert, train a few epochs with GPU augmentation.
* :mod:`.sampledata` -- ImageFolder trees of generated images.
"""
