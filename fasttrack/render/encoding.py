"""Text fasttrack writes is always valid UTF-8, whatever it quotes.

A file name that is not valid UTF-8 reaches fasttrack as a str holding lone surrogates (`os.fsdecode`,
`surrogateescape`), which no encoder accepts: a renderer that wrote it as is would crash and no verdict would
be written. The rule, for every output (text, JSON, Markdown, SARIF):

- a string that holds a lone surrogate is written as `fasttrack.sanitize.visible` of it: each byte that was
  not UTF-8 as `\\xNN`, a backslash as `\\\\`, control and invisible characters escaped, so it is one line
  of valid UTF-8 and reads as what it is (`path_text` is the same for bytes);
- any other string is written unchanged (JSON escapes its control characters itself).

So a JSON verdict is always writable; a consumer recognises a carried name by its backslash escapes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fasttrack.sanitize import visible

if TYPE_CHECKING:
    from fasttrack.verdict import Verdict

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def encodable(text: str) -> str:
    """`text` unchanged when it encodes as UTF-8, else each lone surrogate written as an escape."""
    if not has_surrogate(text):
        return text
    return _SURROGATE.sub(lambda m: visible(m.group(0)), text)


def json_safe(data: Any) -> Any:
    """`data` (from `model_dump(mode="json")`) with every string holding a lone surrogate replaced by its
    `visible` form (keys too)."""
    if isinstance(data, str):
        return visible(data) if has_surrogate(data) else data
    if isinstance(data, list):
        return [json_safe(x) for x in data]
    if isinstance(data, dict):
        return {json_safe(k): json_safe(v) for k, v in data.items()}
    return data


def safe_verdict(verdict: Verdict) -> Verdict:
    """The verdict itself when every string in it encodes as UTF-8; else a copy with each string that holds
    a lone surrogate replaced by its `visible` form, which every renderer can write."""
    from pydantic_core import PydanticSerializationError

    try:
        verdict.model_dump_json()
        return verdict
    except PydanticSerializationError:
        return type(verdict).model_validate(json_safe(verdict.model_dump(mode="json")))
