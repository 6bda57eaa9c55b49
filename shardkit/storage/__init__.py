"""Storage: every byte shardkit reads or writes, on local disk or any fsspec URL.

* :mod:`.fs` -- URLs, opening, listing and atomic writes through fsspec.
* :mod:`.retry` -- a file that resumes at its byte offset after a transient error, with a retry log.
* :mod:`.cache` -- a bounded local cache of remote shards.
* :mod:`.opener` -- how the loader opens a shard (cache, retry, options per backend) and its options.
"""
