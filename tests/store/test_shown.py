"""Store URLs as messages and printed output show them (gpuzarr.store.shown.shown_url)."""

from __future__ import annotations

import pytest

from gpuzarr.store.shown import shown_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://host/d.zarr?sv=1&sig=SECRET", "https://host/d.zarr?…"),
        ("https://user:PASSWORD@host/d.zarr", "https://host/d.zarr"),
        ("https://user:PASSWORD@host/d.zarr?sig=SECRET", "https://host/d.zarr?…"),
        ("http://host?sig=SECRET", "http://host?…"),
        ("http://host/x#frag?sig=SECRET", "http://host/x#…"),
        ("http://host/x?a=b@c/d", "http://host/x?…"),  # an "@" in the query is no user
        ("s3://bucket/x.zarr", "s3://bucket/x.zarr"),
        ("data/x.zarr", "data/x.zarr"),
        ("data/what?.zarr", "data/what?.zarr"),  # a plain path is the caller's own
    ],
)
def test_shown_urls_keep_out_credentials_and_queries(url: str, shown: str) -> None:
    assert shown_url(url) == shown
