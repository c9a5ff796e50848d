"""Divisors of chunk sizes: the number theory behind TensorStore's chunk shape choice.

Choosing a read chunk that divides a hard write (shard) chunk size needs the divisor of a 64-bit
integer nearest a target. Sizes up to 2**62 are factorised with deterministic Miller-Rabin and
Pollard's rho, so even a large prime extent is answered quickly.
"""

from __future__ import annotations

import bisect
import math
from functools import lru_cache

__all__ = ["divisors", "nearest_divisor"]

#: How far from the requested size a divisor of the write chunk size is searched for.
MAX_DIVISOR_SEARCH_DISTANCE = 1_000_000


def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (these bases suffice for every 64-bit n)."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def find_factor(n: int) -> int:
    """A nontrivial factor of the odd composite ``n`` (Pollard's rho, Brent's variant)."""
    for c in range(1, n):
        x = y = 2
        factor = 1
        while factor == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            factor = math.gcd(abs(x - y), n)
        if factor != n:
            return factor
    raise AssertionError(f"no factor found for {n}")  # unreachable for composite n


def prime_factors(n: int) -> list[int]:
    factors: list[int] = []
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            factors.append(p)
            n //= p
    pending = [n] if n > 1 else []
    while pending:
        m = pending.pop()
        if is_prime(m):
            factors.append(m)
        else:
            f = find_factor(m)
            pending += [f, m // f]
    return factors


@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    """All divisors of ``n``, ascending."""
    found = [1]
    counts: dict[int, int] = {}
    for p in prime_factors(n):
        counts[p] = counts.get(p, 0) + 1
    for p, k in counts.items():
        found = [d * p**e for d in found for e in range(k + 1)]
    return tuple(sorted(found))


@lru_cache(maxsize=4096)
def nearest_divisor(dividend: int, target: int) -> int:
    """The divisor of ``dividend`` nearest ``target``; on a tie the smaller one.

    Only divisors less than ``MAX_DIVISOR_SEARCH_DISTANCE`` away from ``target`` count; failing
    those, ``dividend`` itself is used. Cached because the bisection asks the same question often.
    """
    if target >= dividend:
        return dividend
    if dividend % target == 0:
        return target
    # Most answers are a few steps away; look there first before factorising ``dividend``.
    for offset in range(1, 64):
        if target > offset and dividend % (target - offset) == 0:
            return target - offset
        if dividend % (target + offset) == 0:
            return target + offset
    candidates = divisors(dividend)
    above = bisect.bisect_left(candidates, target)  # candidates[above] > target: target is no divisor
    best: int | None = None
    for candidate in (candidates[above - 1], candidates[above]):
        distance = abs(candidate - target)
        # ``below`` comes first, so on a tie it stays.
        if distance < MAX_DIVISOR_SEARCH_DISTANCE and (best is None or distance < abs(best - target)):
            best = candidate
    return dividend if best is None else best
