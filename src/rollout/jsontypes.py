"""The one name for free-form JSON: what json.loads gives and what an event's data holds.

Its values are hostile data (a host's answer, a journal line): read them with isinstance
checks, never trust their types. Everything with a known shape has a type of its own.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = Any
"""A JSON value (a dict, list, str, int, float, bool or None) whose shape nobody fixed."""

JSONObject: TypeAlias = dict[str, JSON]
"""A JSON object: a host script's report, an event's data."""
