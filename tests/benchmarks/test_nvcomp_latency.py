"""``benchmarks.nvcomp_latency`` builds the streams nvCOMP's RAW bitstreams decode (checked on the
host here; the timing needs a GPU)."""

from __future__ import annotations

import pytest

from benchmarks import nvcomp_latency
from benchmarks.datasets import make_volume


@pytest.mark.parametrize("algorithm", sorted(nvcomp_latency.ALGORITHMS))
def test_streams_decode_to_the_volume(algorithm: str) -> None:
    encoded, nbytes = nvcomp_latency.streams(algorithm, 64 * 1024, 3)
    flat = make_volume((64, 64, 256)).reshape(-1).view("u1")
    assert len(encoded) == 3 and nbytes == 64 * 1024
    for i, stream in enumerate(encoded):
        assert len(stream) < nbytes  # compressed
        assert nvcomp_latency.host_decode(algorithm, stream, nbytes) == flat[i * nbytes : (i + 1) * nbytes].tobytes()


def test_more_streams_than_the_volume_holds_repeat_it() -> None:
    encoded, nbytes = nvcomp_latency.streams("deflate", 2 * 1024 * 1024, 3)
    assert len(set(encoded)) == 1 and nbytes == 2 * 1024 * 1024
