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
