"""Transitional, for tools/ only: the names ``tools/{soak,stress,outage_log,bench_loader,bench_devicedecode}.py``
import as ``helpers`` (they put tests/ on sys.path). Tests import ``tests.support.*`` instead; delete this file
once those tools import ``tests.support`` directly."""

from support.data import write_dataset
from support.faults import FaultProxy, free_port
from support.probes import children, num_threads, open_fds, rss_bytes, wait_for

__all__ = ["FaultProxy", "children", "free_port", "num_threads", "open_fds", "rss_bytes", "wait_for", "write_dataset"]
