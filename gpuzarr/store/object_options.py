"""``storage_options`` for object stores and HTTP: obstore's configuration plus gpuzarr's own keys.

One flat dict, as zarr-python and fsspec take it, split here into what obstore's store
constructors want (``config``, ``client_options``, ``retry_config``) and what gpuzarr keeps:

* gpuzarr's keys: ``io_concurrency`` (requests in flight per read; default the
  ``remote_concurrency`` setting) and ``cache_bytes`` (the host cache's byte budget, see
  :mod:`gpuzarr.store`'s ``make_store``);
* retries: ``max_retries`` (default 5), ``retry_timeout`` (seconds, default 60: no retry starts
  after it), ``init_backoff`` (seconds, default 0.1), ``max_backoff`` (seconds, default 10),
  ``backoff_base`` (default 2): exponential backoff with jitter, on 5xx answers, dropped
  connections and timeouts;
* obstore's ``ClientConfig`` keys (:data:`CLIENT_KEYS`), ``timeout`` (a whole request, default
  30 s) and ``connect_timeout`` (default 5 s) among them; numbers are seconds;
* everything else is the service's configuration (``S3Config``, ``GCSConfig``,
  ``AzureConfig``: ``endpoint``, ``region``, ``access_key_id``, ``secret_access_key``,
  ``skip_signature``, ...), which obstore checks, and which it completes from the environment
  (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``GOOGLE_SERVICE_ACCOUNT``, ...).

An ``endpoint`` starting with ``http://`` (a local S3-compatible server) turns on
``allow_http`` unless the options say otherwise: obstore refuses plain HTTP by default, and
naming such an endpoint already says it is meant.

The defaults are shorter than obstore's own (10 retries within 3 minutes): a training job or a
notebook wants a failing server reported in about a minute, not in three.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from ..errors import InvalidArgumentError

#: obstore's ClientConfig keys (obstore/_store/_client.pyi): HTTP client settings.
CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "root_certificate",
        "timeout",
        "user_agent",
    }
)
_CLIENT_DURATIONS = frozenset(
    {"connect_timeout", "http2_keep_alive_timeout", "pool_idle_timeout", "read_timeout", "timeout"}
)
RETRY_KEYS = frozenset({"max_retries", "retry_timeout", "init_backoff", "max_backoff", "backoff_base"})
GPUZARR_KEYS = frozenset({"io_concurrency", "cache_bytes"})

DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {"timeout": timedelta(seconds=30), "connect_timeout": timedelta(seconds=5)}
DEFAULT_RETRY: dict[str, float] = {
    "max_retries": 5,
    "retry_timeout": 60.0,
    "init_backoff": 0.1,
    "max_backoff": 10.0,
    "backoff_base": 2.0,
}


@dataclass(frozen=True)
class ObjectStoreOptions:
    """``storage_options`` split by who reads them (see the module docstring)."""

    config: dict[str, Any] = field(default_factory=dict)
    client_options: dict[str, Any] = field(default_factory=dict)
    retry_config: dict[str, Any] = field(default_factory=dict)
    io_concurrency: int | None = None
    cache_bytes: int | None = None

    @classmethod
    def from_storage_options(
        cls, storage_options: dict[str, Any] | None, environ_prefix: str | None = None
    ) -> ObjectStoreOptions:
        """Split ``storage_options``, applying gpuzarr's defaults; InvalidArgumentError names a
        bad value's key.

        ``environ_prefix`` (``"AWS_"``, ``"GOOGLE_"``, ``"AZURE_"``): the service whose client
        settings in the environment (``AWS_ALLOW_HTTP``, ``AWS_PROXY_URL``, ...) stand between
        gpuzarr's defaults and the options given. obstore reads them itself only where no client
        options are passed, and gpuzarr always passes its timeouts.
        """
        options = dict(storage_options or {})
        if not all(isinstance(k, str) for k in options):
            raise InvalidArgumentError(f"storage_options: keys must be strings, got {sorted(map(repr, options))}")
        io_concurrency = _positive_int(options.pop("io_concurrency", None), "io_concurrency")
        cache_bytes = _positive_int(options.pop("cache_bytes", None), "cache_bytes")
        retry = {**DEFAULT_RETRY, **{k: options.pop(k) for k in list(options) if k in RETRY_KEYS}}
        client = {
            **DEFAULT_CLIENT_OPTIONS,
            **_client_options_from_environment(environ_prefix),
            **{k: options.pop(k) for k in list(options) if k in CLIENT_KEYS},
        }
        for key in _CLIENT_DURATIONS & set(client):
            client[key] = _duration(client[key], key, keep_strings=True)
        for key, value in options.items():
            if isinstance(value, str) and _CONTROL.search(value):
                # obstore turns such a value into a request header and panics on it (a
                # PanicException, which no ``except Exception`` catches): a key read from a
                # file with its newline.
                raise InvalidArgumentError(f"storage_options[{key!r}]: the value holds a control character")
        endpoints = [k for k in ("endpoint", "aws_endpoint", "endpoint_url", "aws_endpoint_url") if k in options]
        endpoint = options[endpoints[0]] if endpoints else None
        for key in endpoints:  # every spelling obstore takes
            _check_endpoint(options[key], key)
        if isinstance(endpoint, str) and endpoint.startswith("http://"):
            client.setdefault("allow_http", True)
        return cls(options, client, _retry_config(retry), io_concurrency, cache_bytes)


#: obstore's scheme -> the prefix of its service's environment variables
ENVIRONMENT_PREFIXES = {
    "s3": "AWS_",
    "gs": "GOOGLE_",
    **dict.fromkeys(("az", "azure", "abfs", "abfss"), "AZURE_"),
}


def _client_options_from_environment(prefix: str | None) -> dict[str, str]:
    """The client settings of the environment for a service (``AWS_ALLOW_HTTP=true``: allow_http),
    as obstore's builders read them: a variable of the prefix and the key's name, upper case."""
    if prefix is None:
        return {}
    found = {}
    for key in CLIENT_KEYS - {"default_headers"}:  # a mapping, which no variable holds
        value = os.environ.get(prefix + key.upper())
        if value is not None:
            found[key] = value
    return found


def _retry_config(values: dict[str, Any]) -> dict[str, Any]:
    """obstore's RetryConfig from the flat keys."""
    max_retries = values["max_retries"]
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise InvalidArgumentError(f"storage_options['max_retries']: expected an integer >= 0, got {max_retries!r}")
    base = values["backoff_base"]
    if not isinstance(base, int | float) or isinstance(base, bool) or base < 1:
        raise InvalidArgumentError(f"storage_options['backoff_base']: expected a number >= 1, got {base!r}")
    return {
        "max_retries": max_retries,
        "retry_timeout": _duration(values["retry_timeout"], "retry_timeout"),
        "backoff": {
            "init_backoff": _duration(values["init_backoff"], "init_backoff"),
            "max_backoff": _duration(values["max_backoff"], "max_backoff"),
            "base": float(base),
        },
    }


#: Characters no configuration value (credential, region, endpoint) may hold.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: The longest duration taken (a year): obstore's durations are finite, and a timedelta of
#: 1e20 seconds overflowed.
_MAX_SECONDS = 365 * 24 * 3600
#: A duration as obstore (humantime) writes it: numbers with units, "30s", "1m 30s", "2 minutes", "1h30m".
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Zµ]*)")
_UNIT_SECONDS = {
    **dict.fromkeys(("ns", "nsec", "nanos", "nanosecond", "nanoseconds"), 1e-9),
    **dict.fromkeys(("us", "µs", "usec", "micros", "microsecond", "microseconds"), 1e-6),
    **dict.fromkeys(("ms", "msec", "millis", "millisecond", "milliseconds"), 1e-3),
    **dict.fromkeys(("", "s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400.0),
}


def _seconds_of(text: str) -> float | None:
    """The seconds a duration string says, or None where it is no duration."""
    total, at, parts = 0.0, 0, 0
    for match in _PART.finditer(text):
        if match.start() != at or match.end() == match.start():
            return None
        unit = _UNIT_SECONDS.get(match.group(2))
        if unit is None or (match.group(2) == "" and parts):
            return None
        total += float(match.group(1)) * unit
        at, parts = match.end(), parts + 1
    return total if parts and text[at:].strip() == "" else None


def _duration(value: Any, key: str, keep_strings: bool = False) -> Any:
    """Seconds (a number), a timedelta or a string of numbers and units ("30s", "500ms", "1m 30s",
    "2 minutes"), checked; as a timedelta, or the string itself with ``keep_strings`` (obstore's
    client options parse them; its retry settings take timedeltas only)."""
    if isinstance(value, str):
        seconds = _seconds_of(value)
        if seconds is not None and seconds <= _MAX_SECONDS:
            return value if keep_strings else timedelta(seconds=seconds)
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= _MAX_SECONDS:
        return timedelta(seconds=value)
    raise InvalidArgumentError(
        f"storage_options[{key!r}]: expected seconds (a number from 0 to {_MAX_SECONDS}) or a duration such as "
        f"'30s', '500ms' or '1m 30s' (at most a year), got {value!r}"
    )


def _check_endpoint(endpoint: Any, key: str = "endpoint") -> None:
    """An endpoint is an http(s) URL with a host: obstore took "not a url" and panicked at the
    first request (a ``PanicException``, which ``except Exception`` does not catch)."""
    parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        expected = "expected an http:// or https:// URL"
        raise InvalidArgumentError(f"storage_options[{key!r}]: {expected}, got {endpoint!r}")
    if "@" in parts.netloc:
        # Not read by obstore, and shown in every message and spec: the secret is not repeated.
        raise InvalidArgumentError(
            f"storage_options[{key!r}]: credentials in the endpoint URL are not read; give them as "
            "access_key_id and secret_access_key (or in the environment)"
        )


def _positive_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"storage_options[{key!r}]: expected a positive integer, got {value!r}")
    return value
