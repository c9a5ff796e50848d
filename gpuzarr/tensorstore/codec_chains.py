"""Codec chains as TensorStore merges them: whether a constraint matches a stored chain
(:func:`codecs_match`: ``metadata.codecs`` strictly, ``schema.codec`` by TensorStore's
non-strict merge) and the chain two of them make (:func:`merged_codecs`, on create).

TensorStore's rules (``ZarrCodecChainSpec::MergeFrom``), part by part: array->array codecs
pair up in order, one trailing transpose more or less allowed where not strict; a chain
without an array->bytes codec leaves it unconstrained; bytes->bytes codecs pair up, as many on
each side; and where one chain is a lone ``sharding_indexed`` codec nesting shards deeper than
the other, the other goes into its inner chunks' chain. Pure JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codecs.registry import codec_from_json
from ..errors import GpuZarrError
from ..metadata.chain import ARRAY_TO_ARRAY_NAMES, ARRAY_TO_BYTES_NAMES, parse_codec_chain, transpose_permutation

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..metadata.json_types import CodecJSON

__all__ = ["CodecsDoNotMerge", "codecs_match", "json_subset", "merged_codecs"]


def json_subset(constraint: Any, stored: Any) -> bool:
    """Whether every member given in ``constraint`` equals the one in ``stored`` (recursively)."""
    if isinstance(constraint, dict):
        return isinstance(stored, dict) and all(
            k in stored and json_subset(v, stored[k]) for k, v in constraint.items()
        )
    if isinstance(constraint, list):
        return (
            isinstance(stored, list)
            and len(constraint) == len(stored)
            and all(json_subset(c, s) for c, s in zip(constraint, stored, strict=True))
        )
    return bool(constraint == stored)


def codecs_match(
    constraint: Sequence[CodecJSON], stored: Sequence[CodecJSON], rank: int | None = None, *, strict: bool = True
) -> bool:
    """Whether a partial codec chain matches a stored one, as TensorStore merges them.

    ``strict`` (``metadata.codecs``, TensorStore's strict merge): a chain without an
    array->bytes codec leaves that codec unconstrained; the other codecs pair up in order, as
    many on each side. Not ``strict`` (``schema.codec``, its non-strict merge), part by part:

    - array->array codecs pair up in order; either side may have one transpose more, last;
    - a chain without an array->bytes codec leaves that codec unconstrained;
    - bytes->bytes codecs pair up in order, as many on each side (none given: none stored);
    - where one chain is a lone ``sharding_indexed`` codec (nothing before or after it) and
      nests shards deeper than the other, the other is matched against its inner chunks' chain
      instead, shard within shard: ``["zstd"]`` matches a sharded array whose inner chunks are
      zstd (and, as in TensorStore, a lone sharding constraint whose inner codecs are not
      given matches unsharded chunks).

    A member the constraint gives must equal the stored one once both are normalised (the
    stored codec's defaults filled in, as TensorStore's own spec of the array states them:
    ``index_location`` "end", zstd ``checksum`` false; a transpose ``order`` of "C" or "F" as
    the permutation of ``rank`` axes; a ``bytes`` ``endian`` given for a data type without byte
    order, which the stored chain leaves out)."""
    if strict:
        if not any(c["name"] in ARRAY_TO_BYTES_NAMES for c in constraint):
            stored = [c for c in stored if c["name"] not in ARRAY_TO_BYTES_NAMES]
        return len(constraint) == len(stored) and all(
            _codec_matches(c, s, rank, strict) for c, s in zip(constraint, stored, strict=True)
        )
    mine, theirs = _chain_parts(constraint), _chain_parts(stored)
    my_height, their_height = _sharding_height(constraint), _sharding_height(stored)
    if their_height > my_height and _is_lone(theirs):
        return codecs_match(constraint, _sub_chunk_chain(theirs[1]), rank, strict=False)
    if my_height > their_height and _is_lone(mine):
        assert mine[1] is not None  # a lone sharding codec
        given = (mine[1].get("configuration") or {}).get("codecs")  # None: unconstrained
        return given is None or codecs_match(parse_codec_chain(given, "codecs"), stored, rank, strict=False)
    (my_arrays, my_a2b, my_bytes), (their_arrays, their_a2b, their_bytes) = mine, theirs
    if not _array_codecs_pair(my_arrays, their_arrays) or len(my_bytes) != len(their_bytes):
        return False
    pairs = [*zip(my_arrays, their_arrays, strict=False), *zip(my_bytes, their_bytes, strict=True)]
    if my_a2b is not None:
        if their_a2b is None:
            return False
        pairs.append((my_a2b, their_a2b))
    return all(_codec_matches(c, s, rank, strict) for c, s in pairs)


def _array_codecs_pair(a: Sequence[CodecJSON], b: Sequence[CodecJSON]) -> bool:
    """Whether two lists of array->array codecs pair up in a non-strict merge: as many, or one
    more on either side that is a transpose, last."""
    if len(a) == len(b):
        return True
    longer = a if len(a) > len(b) else b
    return abs(len(a) - len(b)) == 1 and longer[-1]["name"] == "transpose"


class CodecsDoNotMerge(ValueError):
    """Two codec chains that TensorStore's merge refuses (:func:`merged_codecs`)."""


def merged_codecs(target: Sequence[CodecJSON], source: Sequence[CodecJSON], rank: int | None) -> list[CodecJSON]:
    """The chain TensorStore's non-strict merge makes of ``target`` and ``source`` (the
    :func:`codecs_match` rules, not strict): what either gives, in one chain. A lone
    ``sharding_indexed`` codec nesting shards deeper than the other chain takes it into its
    inner chunks' chain (as theirs where it gives none). Raises CodecsDoNotMerge where they
    contradict each other."""
    t, s = _chain_parts(target), _chain_parts(source)
    t_height, s_height = _sharding_height(target), _sharding_height(source)
    if t_height != s_height and _is_lone(t if t_height > s_height else s):
        outer, other = (t, source) if t_height > s_height else (s, target)
        assert outer[1] is not None  # a lone sharding codec
        config = dict(outer[1].get("configuration") or {})
        given = config.get("codecs")
        inner = list(other) if given is None else merged_codecs(parse_codec_chain(given, "codecs"), other, rank)
        return [{**outer[1], "configuration": {**config, "codecs": inner}}]
    (t_arrays, t_a2b, t_bytes), (s_arrays, s_a2b, s_bytes) = t, s
    if not _array_codecs_pair(t_arrays, s_arrays):
        raise CodecsDoNotMerge("a different number of array -> array codecs")
    if len(t_bytes) != len(s_bytes):
        raise CodecsDoNotMerge("a different number of bytes -> bytes codecs")
    arrays = [_merged_codec(a, b, rank) for a, b in zip(t_arrays, s_arrays, strict=False)]
    arrays += (t_arrays if len(t_arrays) > len(s_arrays) else s_arrays)[len(arrays) :]
    a2b = [] if t_a2b is None and s_a2b is None else [_merged_codec(t_a2b, s_a2b, rank)]
    return [*arrays, *a2b, *(_merged_codec(a, b, rank) for a, b in zip(t_bytes, s_bytes, strict=True))]


def _merged_codec(a: CodecJSON | None, b: CodecJSON | None, rank: int | None) -> CodecJSON:
    """One codec with the members of both (either may be None); the same member given twice
    must agree."""
    if a is None or b is None:
        either = a if a is not None else b
        assert either is not None
        return either
    if a["name"] != b["name"]:
        raise CodecsDoNotMerge(f"{a['name']} against {b['name']}")
    config = dict(a.get("configuration") or {})
    for key, value in (b.get("configuration") or {}).items():
        if key not in config:
            config[key] = value
        elif a["name"] == "sharding_indexed" and key in ("codecs", "index_codecs"):
            config[key] = merged_codecs(parse_codec_chain(config[key], key), parse_codec_chain(value, key), rank)
        elif a["name"] == "transpose" and key == "order" and rank is not None:
            if transpose_permutation(config[key], rank) != transpose_permutation(value, rank):
                raise CodecsDoNotMerge(f"transpose order {config[key]!r} against {value!r}")
        elif config[key] != value:
            raise CodecsDoNotMerge(f"{a['name']} {key} {config[key]!r} against {value!r}")
    return {"name": a["name"], "configuration": config} if config else {"name": a["name"]}


if TYPE_CHECKING:
    #: a codec chain's parts: its array->array codecs, its array->bytes codec (None where a
    #: constraint leaves it out) and its bytes->bytes codecs
    _ChainParts = tuple[list[CodecJSON], CodecJSON | None, list[CodecJSON]]


def _chain_parts(chain: Sequence[CodecJSON]) -> _ChainParts:
    at = next((k for k, c in enumerate(chain) if c["name"] in ARRAY_TO_BYTES_NAMES), None)
    if at is None:  # a constraint without one: its leading array->array codecs, then the rest
        at = 0
        while at < len(chain) and chain[at]["name"] in ARRAY_TO_ARRAY_NAMES:
            at += 1
        return list(chain[:at]), None, list(chain[at:])
    return list(chain[:at]), chain[at], list(chain[at + 1 :])


def _is_lone(parts: _ChainParts) -> bool:
    arrays, a2b, after = parts
    return not arrays and not after and a2b is not None and a2b["name"] == "sharding_indexed"


def _sub_chunk_chain(sharding: CodecJSON | None) -> list[CodecJSON]:
    assert sharding is not None
    return parse_codec_chain((sharding.get("configuration") or {}).get("codecs", []), "codecs")


def _sharding_height(chain: Sequence[CodecJSON]) -> int:
    """How deep shards nest in ``chain`` (0: no sharding codec), as TensorStore counts them."""
    a2b = _chain_parts(chain)[1]
    if a2b is None or a2b["name"] != "sharding_indexed":
        return 0
    return 1 + _sharding_height(_sub_chunk_chain(a2b))


def _codec_matches(c: CodecJSON, s: CodecJSON, rank: int | None, strict: bool) -> bool:
    """Whether the members constraint codec ``c`` gives equal those of stored codec ``s``."""
    if c["name"] != s["name"]:
        return False
    config = dict(c.get("configuration") or {})
    stored_config = _with_defaults(s)
    if c["name"] == "sharding_indexed":
        for chain in ("codecs", "index_codecs"):
            if chain in config:
                inner = parse_codec_chain(config.pop(chain), chain)
                stored_inner = parse_codec_chain(stored_config.get(chain, []), chain)
                if not codecs_match(inner, stored_inner, rank, strict=strict):
                    return False
    if c["name"] == "transpose" and rank is not None:
        config = {k: transpose_permutation(v, rank) if k == "order" else v for k, v in config.items()}
        stored_config["order"] = transpose_permutation(stored_config.get("order"), rank)
    if c["name"] == "bytes" and "endian" not in stored_config:
        config.pop("endian", None)  # stored without: a data type without byte order
    return json_subset(config, stored_config)


def _with_defaults(codec: CodecJSON) -> dict[str, Any]:
    """The configuration of a stored codec with the defaults its parser fills in, or as stored
    where gpuzarr does not parse it."""
    try:
        parsed = codec_from_json(codec).configuration()
    except GpuZarrError:
        parsed = None
    return dict(parsed if parsed is not None else codec.get("configuration") or {})
