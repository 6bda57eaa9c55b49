"""Fixtures for real local servers: moto's S3 server and a plain HTTP server, on 127.0.0.1 only."""

from __future__ import annotations

import functools
import http.server
import os
import threading

import pytest

from tests.support.faults import free_port


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` run first, in their collected order: under ``-n 2 --dist worksteal`` a long test
    that starts last keeps one process busy while the other has nothing left to take."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def s3_endpoint():
    """Start moto's S3 server on 127.0.0.1 (real HTTP, reached through s3fs); yield its URL."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        yield endpoint
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture()
def s3(s3_endpoint):
    """``(storage_options, bucket)``: a fresh bucket on the moto server and s3fs options to reach it.

    The options are a user's defaults: fsspec keeps one s3fs instance (one client, one listings cache) per options
    and process, so the tests read through the same cached instance a training process would."""
    import uuid

    import s3fs

    opts = {
        "client_kwargs": {"endpoint_url": s3_endpoint},
        "key": "testing",
        "secret": "testing",
    }
    fs = s3fs.S3FileSystem(**opts)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield opts, bucket


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - silence request logs
        pass


@pytest.fixture()
def http_root(tmp_path):
    """``(base_url, directory)``: a threaded HTTP server on 127.0.0.1 serving ``directory``."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", str(root)
    finally:
        server.shutdown()
        server.server_close()
        t.join(timeout=5)
