"""Example schemas and hypothesis strategies shared by the tests/test_shared_* modules.

This module holds no tests. The other modules import it by name (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

# The schema of DESIGN.md's wire format section.
APP_USAGE: dict[str, Any] = {
    "name": "app-usage",
    "version": 1,
    "epsilon": 2.0,
    "window": "day",
    "split": "equal",
    "description": "...",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"],
         "mechanism": "auto"},
    ],
}

# One attribute per mechanism, each named explicitly, hourly windows.
EVERY_MECHANISM: dict[str, Any] = {
    "name": "every-mechanism",
    "version": 3,
    "epsilon": 3.0,
    "window": "hour",
    "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"],
         "mechanism": "grr"},
        {"name": "lang", "type": "categorical", "categories": ["en", "de", "fr", "es", "it", "pt", "nl", "pl"],
         "mechanism": "oue"},
    ],
}

# Each report carries one attribute with the whole budget.
SAMPLED: dict[str, Any] = {**copy.deepcopy(EVERY_MECHANISM), "name": "sampled", "split": "sample"}

EXAMPLES = {"app-usage": APP_USAGE, "every-mechanism": EVERY_MECHANISM, "sampled": SAMPLED}


def example(name: str = "app-usage") -> dict[str, Any]:
    """A fresh deep copy of an example schema, safe to mutate."""
    return copy.deepcopy(EXAMPLES[name])


MISSING = object()  # as a value for with_value(): delete the field


def with_value(obj: Any, path: tuple, value: Any) -> Any:
    """A deep copy of ``obj`` with the value at ``path`` (keys and indices) set, or deleted for MISSING."""
    out = copy.deepcopy(obj)
    *parents, last = path
    target = out
    for key in parents:
        target = target[key]
    if value is MISSING:
        del target[last]
    else:
        target[last] = value
    return out


# Any JSON-like value, including what Python's json module also produces (huge ints, nan, inf).
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=80),
    st.sampled_from(["", "day", "hour", "equal", "sample", "boolean", "categorical", "rr", "grr", "oue",
                     "auto", "app-usage", "dark_mode", "os", "linux", "2026-11-21", "2026-11-21T13"]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=6),
                               st.dictionaries(st.text(max_size=12), children, max_size=6)),
    max_leaves=20,
)
