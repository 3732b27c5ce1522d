"""The Verdict as JSON: the versioned contract every later consumer reads (`fasttrack schema verdict`).

Always writable: a string that cannot be encoded as UTF-8 (a file name that is not valid UTF-8) is carried as
its escaped text (fasttrack.render.encoding)."""

from __future__ import annotations

import json

from pydantic_core import PydanticSerializationError

from fasttrack.render.encoding import json_safe
from fasttrack.verdict import Verdict


def render(verdict: Verdict) -> str:
    try:
        return verdict.model_dump_json(indent=2) + "\n"
    except PydanticSerializationError:
        return json.dumps(json_safe(verdict.model_dump(mode="json")), indent=2, ensure_ascii=False) + "\n"
