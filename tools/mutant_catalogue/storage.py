"""Mutants of reading object storage (``shardkit/loader/retry.py``, ``shardkit/storage.py``)."""

ROW_RETRY = "Object storage that fails: retried with capped, jittered backoff, resumed at the byte offset"

MUTANTS = [
    {
        "id": "retry-backoff-constant",
        "row": ROW_RETRY,
        "file": "shardkit/loader/retry.py",
        "old": "base = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))",
        "new": "base = _BACKOFF_S",
        "tests": ["tests/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
    {
        "id": "retry-backoff-uncapped",
        "row": ROW_RETRY,
        "file": "shardkit/loader/retry.py",
        "old": "base = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))",
        "new": "base = _BACKOFF_S * 2 ** (attempt - 1)",
        "tests": ["tests/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
    {
        "id": "retry-backoff-no-jitter",
        "row": ROW_RETRY,
        "file": "shardkit/loader/retry.py",
        "old": "return base * (0.5 + int.from_bytes(h, \"big\") / 65535 / 2)",
        "new": "return base",
        "tests": ["tests/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
]
