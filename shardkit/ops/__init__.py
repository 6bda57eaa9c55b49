"""Operations on a loader a person runs by hand: ``shardkit bench`` (``bench.py``: the loader's throughput per worker
count, the stage that limits it) and the doctor's verdicts (``doctor.py``: will training wait on data?)."""
