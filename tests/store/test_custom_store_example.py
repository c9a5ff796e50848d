"""The example store of docs/stores.md ("Writing your own store"), run exactly as printed:
through the conformance suite, and through the public API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "stores.md"


def _examples() -> list[str]:
    """The Python blocks of the "Writing your own store" section, in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Writing your own store", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


STORE_CODE, USAGE_CODE, SUITE_CODE = _examples()

_namespace: dict[str, Any] = {"__name__": "docs_stores_example"}
exec(compile(STORE_CODE, str(DOC), "exec"), _namespace)
DictStore = _namespace["DictStore"]
# The suite as the page subclasses it; pytest collects the class from this module.
exec(compile(SUITE_CODE, str(DOC), "exec"), _namespace)
TestDictStore = _namespace["TestDictStore"]


def test_the_usage_example_runs(capsys: Any) -> None:
    namespace = {"DictStore": DictStore}
    exec(compile(USAGE_CODE, str(DOC), "exec"), namespace)
    assert "[[1. 1.]" in capsys.readouterr().out
    a = namespace["gpuzarr"].open(namespace["store"], mode="r")
    np.testing.assert_array_equal(np.asarray(a[...]), np.ones((100, 100), dtype="float32"))
    assert "c/0/0" in namespace["store"].data  # a chunk key of the dict store


def test_the_default_lock_keeps_read_modify_writes_of_threads_apart() -> None:
    """A store of a user's own got a lock that locked nothing: threads writing inner chunks of
    one shard through it (each write a read-modify-write of the shard) lost each other's."""
    from .conformance import count_under_lock

    store = DictStore()
    assert store.locks_across_threads
    assert count_under_lock(store, "counter", threads=6, times=5, pause=0.001) == b"30"


def test_inner_chunks_of_one_shard_written_from_threads_are_all_kept() -> None:
    import threading

    import gpuzarr

    array = gpuzarr.create_array(DictStore(), shape=(64, 64), dtype="i4", chunks=(8, 8), shards=(64, 64))
    barrier = threading.Barrier(8)

    def write(k: int) -> None:
        barrier.wait()
        for j in range(8):
            array[k * 8 : (k + 1) * 8, j * 8 : (j + 1) * 8] = k * 8 + j

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = np.repeat(np.repeat(np.arange(64).reshape(8, 8), 8, axis=0), 8, axis=1)
    np.testing.assert_array_equal(array[...], expected)
