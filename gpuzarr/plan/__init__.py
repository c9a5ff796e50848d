"""Selection planning: selection + chunk grid -> chunk projections (pure NumPy)."""

from .selection import (
    ChunkProjection,
    SelectionPlan,
    expand_ellipsis,
    plan_orthogonal,
    plan_selection,
    plan_vectorized,
)

__all__ = [
    "ChunkProjection",
    "SelectionPlan",
    "expand_ellipsis",
    "plan_orthogonal",
    "plan_selection",
    "plan_vectorized",
]
