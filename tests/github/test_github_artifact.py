"""The verdict artifact as hostile input: size cap, schema, and the claims it makes (PR, head commit)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fasttrack.github.artifact import PrMeta, RejectedVerdict, check_claims, load_meta, load_verdict


def test_a_good_verdict_loads(tmp_path: Path, verdicts: Any) -> None:
    v = verdicts.make(verdicts.many(3))
    f = tmp_path / "verdict.json"
    f.write_text(v.model_dump_json(), encoding="utf-8")
    assert load_verdict(f) == v


def test_size_cap_is_checked_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "verdict.json"
    f.write_bytes(b" " * 2048)
    with pytest.raises(RejectedVerdict, match="2048 bytes, over the 1024-byte cap"):
        load_verdict(f, max_bytes=1024)


def test_schema_errors_name_the_field(tmp_path: Path, verdicts: Any) -> None:
    data = json.loads(verdicts.make(verdicts.many(1)).model_dump_json())
    data["findings"][0]["code"] = "XX1"
    f = tmp_path / "verdict.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RejectedVerdict) as info:
        load_verdict(f)
    assert info.value.field == "findings[0].code" and str(f) in info.value.render()


def test_not_utf8_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "verdict.json"
    f.write_bytes(b'{"tool_version": "\xff\xfe"}')
    with pytest.raises(RejectedVerdict, match="invalid verdict"):
        load_verdict(f)


def test_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(RejectedVerdict, match="not a regular file"):
        load_verdict(tmp_path)


@pytest.mark.parametrize(
    "meta",
    [
        {"pr": 0, "head_sha": "a" * 40},
        {"pr": 7, "head_sha": "A" * 40},
        {"pr": 7, "head_sha": "a" * 39},
        {"pr": 7},
        {"pr": 7, "head_sha": "a" * 40, "x": 1},
        {"pr": True, "head_sha": "a" * 40},
    ],
)
def test_bad_metadata(tmp_path: Path, meta: dict[str, Any]) -> None:
    f = tmp_path / "pr.json"
    f.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(RejectedVerdict, match="invalid PR metadata"):
        load_meta(f)


def test_good_metadata(tmp_path: Path) -> None:
    f = tmp_path / "pr.json"
    f.write_text(json.dumps({"pr": 7, "head_sha": "a" * 40, "base_sha": "b" * 40}), encoding="utf-8")
    assert load_meta(f) == PrMeta(pr=7, head_sha="a" * 40, base_sha="b" * 40)


def test_claims(verdicts: Any) -> None:
    head = verdicts.head
    check_claims(verdicts.make([]), pr=7, head_sha=head)  # matches: no error
    check_claims(verdicts.make([], pr=7), pr=7, head_sha=head.upper())
    check_claims(verdicts.make([], head=None), pr=7, head_sha=None)  # nothing to compare from a laptop
    with pytest.raises(RejectedVerdict, match="for PR #9, not PR #7"):
        check_claims(verdicts.make([], pr=9), pr=7, head_sha=head)
    with pytest.raises(RejectedVerdict, match="names no head commit"):
        check_claims(verdicts.make([], head=None), pr=7, head_sha=head)
    with pytest.raises(RejectedVerdict, match="the triggering run built aaaaaaaaaaaa"):
        check_claims(verdicts.make([], head="c" * 40), pr=7, head_sha=head)
    with pytest.raises(RejectedVerdict, match="metadata claims PR #8"):
        check_claims(verdicts.make([]), pr=7, head_sha=head, meta=PrMeta(pr=8, head_sha=head))
    with pytest.raises(RejectedVerdict, match="metadata claims head"):
        check_claims(verdicts.make([]), pr=7, head_sha=head, meta=PrMeta(pr=7, head_sha="c" * 40))
