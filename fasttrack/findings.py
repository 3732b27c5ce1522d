"""A Finding: what one rule says about one place."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Finding(BaseModel):
    """One result of one rule. `path`/`line` point into the PR head; `point` names an envelope point."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str = Field(pattern=r"^FT\d{3}$")
    severity: Severity
    message: str
    path: str | None = None
    line: int | None = Field(default=None, ge=1)
    fix: str | None = None
    point: dict[str, Any] | None = None
    evidence_file: str | None = None

    @classmethod
    def error(cls, code: str, message: str, **kw: Any) -> Finding:
        return cls(code=code, severity=Severity.ERROR, message=message, **kw)

    @classmethod
    def warning(cls, code: str, message: str, **kw: Any) -> Finding:
        return cls(code=code, severity=Severity.WARNING, message=message, **kw)

    @classmethod
    def info(cls, code: str, message: str, **kw: Any) -> Finding:
        return cls(code=code, severity=Severity.INFO, message=message, **kw)
