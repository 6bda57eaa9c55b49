"""Operations a person runs by hand on a dataset or a loader: ``shardkit verify`` and ``info`` (``verify.py``,
``verify_split.py``, ``verify_generations.py``, ``strays.py``), ``shardkit index`` (``upgrade.py``) and
``shardkit bench`` (``bench.py``)."""
