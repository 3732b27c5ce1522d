"""Read TOML/JSON files into pydantic models, turning every problem into an InputError."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from fasttrack.errors import InputError, from_validation_error

M = TypeVar("M", bound=pydantic.BaseModel)

MAX_INPUT_BYTES = 8 * 1024 * 1024


def read_bytes_bounded(path: Path, what: str) -> bytes:
    if not path.exists():
        raise InputError(f"{what} not found", path=path, fix=f"pass an existing {what} path")
    if not path.is_file():
        raise InputError(f"{what} is not a regular file", path=path)
    size = path.stat().st_size
    if size > MAX_INPUT_BYTES:
        raise InputError(f"{what} is {size} bytes, over the {MAX_INPUT_BYTES}-byte limit", path=path)
    return path.read_bytes()


class DuplicateKey(ValueError):
    """A JSON object names the same key twice: readers disagree on which value counts (pydantic and
    `json` keep the last, others the first or refuse), so such a file has no one meaning."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate key {key[:80]!r}")


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads` that raises DuplicateKey instead of keeping the last value."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def parse_toml_text(text: str, path: str | Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"malformed TOML in {what}: {exc}", path=path,
                         fix="fix the TOML syntax at the position named") from None
    except RecursionError:  # arrays or inline tables nested thousands deep: tomllib recurses per level
        raise InputError(f"the {what} nests arrays or tables too deeply to read", path=path,
                         fix="a real one nests a few levels; flatten it") from None


def validate(model: type[M], data: Any, path: str | Path, what: str) -> M:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise from_validation_error(exc, path, what) from None


def load_toml_model(path: Path, model: type[M], what: str) -> M:
    raw = read_bytes_bounded(path, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{what} is not UTF-8 text", path=path) from None
    return validate(model, parse_toml_text(text, path, what), path, what)


def load_json_model(path: Path, model: type[M], what: str) -> M:
    raw = read_bytes_bounded(path, what)
    try:
        data = json.loads(raw, object_pairs_hook=no_duplicate_keys)
    except DuplicateKey as exc:
        raise InputError(f"the {what} is ambiguous: {exc}", path=path,
                         fix="write each key once (fasttrack's own output never repeats one)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed JSON in {what}: {exc}", path=path) from None
    except RecursionError:  # `[[[[...` thousands deep: the json module recurses per level
        raise InputError(f"the {what} nests too deeply to read", path=path,
                         fix="a real one nests a few levels") from None
    return validate(model, data, path, what)
