"""Store keys (gpuzarr.store.base.validate_key): the one-pass check refuses exactly the keys the
segment rules refuse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuzarr.errors import InvalidKeyError
from gpuzarr.store.base import validate_key


def refused_by_the_rules(key: str) -> bool:
    """The rules, spelled out segment by segment."""
    if key == "" or key.startswith("/") or key.endswith("/") or "\\" in key or "\0" in key:
        return True
    return any(part in ("", ".", "..") for part in key.split("/"))


@given(st.text(alphabet=["a", ".", "/", "\\", "\0", "1", "c"], max_size=12))
def test_validate_key_refuses_exactly_what_the_rules_refuse(key: str) -> None:
    if refused_by_the_rules(key):
        with pytest.raises(InvalidKeyError, match="store key"):
            validate_key(key)
    else:
        assert validate_key(key) == key


@pytest.mark.parametrize("key", ["c/0/1/2", "0.1.2", ".zarray", "a/.zattrs", "...", "a/..b", "..a/b", "a b/c"])
def test_keys_with_dots_inside_segments_are_valid(key: str) -> None:
    assert validate_key(key) == key


def test_a_key_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidKeyError, match="must be strings"):
        validate_key(b"c/0")  # type: ignore[arg-type]


class Key(str):
    pass


def test_a_str_subclass_is_checked_like_a_string() -> None:
    assert validate_key(Key("c/0")) == "c/0"
    with pytest.raises(InvalidKeyError):
        validate_key(Key("c/../0"))
