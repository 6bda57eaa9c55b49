"""RangeFile against a reference: reading a remote object of the manifest's size by ranged GETs delivers exactly
the object when it is the manifest's size, else one error naming the URL and both sizes, whatever the answers
carry (a ``Content-Range`` total or none, a ``416`` past the end) and however the reads are cut."""

from __future__ import annotations

import random
from typing import Optional

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.errors import StorageError
from shardkit.storage.ranged import Answer, ObjectPin, RangeFile, _PastEnd

URL = "s3://b/ds/s.tar"


def _store(served: bytes, with_total: bool, etags: list[str]):
    """A ranged GET over ``served`` (the object the store holds now: ``etags[-1]``)."""
    sent: list[tuple[int, Optional[int]]] = []

    def get(lo: int, hi: Optional[int], if_match: Optional[str]) -> Answer:
        sent.append((lo, hi))
        if lo >= len(served) and len(served) > 0 or (lo > 0 and not served):
            raise _PastEnd(len(served) if with_total else None)
        data = served[lo:hi]
        return Answer(data, len(served) if with_total else None, etags[-1])

    return get, sent


@settings(derandomize=True, deadline=None, max_examples=80, phases=[Phase.explicit, Phase.generate])
@given(
    size=st.integers(1, 3000),
    delta=st.sampled_from([0, 0, -1, 1, -500, 700]),
    with_total=st.booleans(),
    reads=st.lists(st.integers(1, 1500), min_size=1, max_size=8),
)
@example(size=1000, delta=-1, with_total=False, reads=[1000])
@example(size=1000, delta=1, with_total=True, reads=[4096])
@example(size=1000, delta=-500, with_total=False, reads=[600])
def test_a_range_file_delivers_the_manifests_bytes_or_names_both_sizes(size, delta, with_total, reads):
    served = random.Random(size).randbytes(max(0, size + delta))
    get, sent = _store(served, with_total, ['"a"'])
    f = RangeFile(URL, get, size=size, expected=size, real_size=lambda: len(served))
    out, pos, err = bytearray(), 0, None
    try:
        for n in [*reads, size]:  # then to the end
            b = f.read(n)
            out += b
            pos += len(b)
    except StorageError as exc:
        err = str(exc)
    if len(served) == size:
        assert err is None and bytes(out) == served
    elif len(served) > size and not with_total:  # a longer object and no total (never so for a 206): its first
        assert err is None and bytes(out) == served[:size]  # bytes, which the sample checksums and the cache judge
    else:
        assert err is not None and err.startswith(f"{URL}: has {len(served)} bytes, the manifest says {size}; "), err
        assert served.startswith(bytes(out))  # nothing but the object's own bytes came out before the error
    assert all(hi is None or hi <= size for _, hi in sent)  # never asks past the promised size


def test_a_replaced_object_is_named_not_spliced():
    etags = ['"a"']
    served = b"x" * 100
    get, _ = _store(served, True, etags)
    pin = ObjectPin()
    f = RangeFile(URL, get, size=100, expected=100, pin=pin)
    assert f.read(10) == b"x" * 10 and pin.etag == '"a"'
    etags.append('"b"')
    again = RangeFile(URL, get, size=100, expected=100, pin=pin)  # a reopen after an error shares the pin
    again.seek(10)
    with pytest.raises(StorageError, match="changed while reading"):
        again.read(10)
