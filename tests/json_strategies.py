"""Hypothesis strategies shared by the fuzz tests: JSON values and mutations of real documents."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st


def json_values(
    keys: Sequence[str], strings: Sequence[str], *, big_integers: bool = False
) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values whose keys and strings often come from a format's vocabulary."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=8)
        | st.sampled_from(list(strings))
    )
    if big_integers:
        scalars = scalars | st.integers(-(10**30), 10**400)
    key = st.sampled_from(list(keys)) | st.text(max_size=6)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(key, inner, max_size=5),
        max_leaves=25,
    )


def json_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into ``value``, the empty path for the value itself."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += json_paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += json_paths(item, (*path, i))
    return out


RETYPED = (lambda old: str(old), lambda old: [old], lambda old: {"x": old})
ODD_VALUES = (None, -1, 1e308, float("inf"))


@st.composite
def mutated_json(
    draw: st.DrawFn, value: Any, values: st.SearchStrategy[Any], *, retype: bool = False
) -> Any:
    """``value`` with one to three members replaced by ``values``, removed or (with
    ``retype``) turned into another type."""
    value = copy.deepcopy(value)
    actions = ["replace", "drop", "retype"] if retype else ["replace", "drop"]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(json_paths(value)))
        if not path:
            value = draw(values)
            continue
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(actions))
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "retype":
            old = parent[path[-1]]
            choices = [make(old) for make in RETYPED] + list(ODD_VALUES)
            parent[path[-1]] = draw(st.sampled_from(choices))
        else:
            parent[path[-1]] = draw(values)
    return value
