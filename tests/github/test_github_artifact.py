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


# ---- issue 18: the bounded loader and the zip inspection ----


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    from fasttrack.github.artifact import json_depth

    assert json_depth(b'{"a": [1, {"b": "[[[[{{{{\\"]]]"}]}') == 3
    assert json_depth(b"[" * 100 + b"]" * 100, limit=10) == 11  # stops as soon as it passes the cap


def test_a_zip_whose_header_lies_about_its_size_inflates_no_more_than_declared() -> None:
    """Attack: the central directory declares 10 bytes for a 5 MiB entry; the read stops at the declared
    size and the CRC check rejects the entry (nothing past the cap is ever inflated)."""
    import io
    import struct
    import zipfile

    from fasttrack.github.artifact import inspect_zip

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("verdict.json", b"[" + b" " * (5 << 20) + b"]")
        zf.writestr("pr.json", b"{}")
    data = bytearray(buf.getvalue())
    cd = data.rfind(b"PK\x01\x02", 0, data.rfind(b"PK\x01\x02"))  # the first central-directory entry
    struct.pack_into("<I", data, cd + 24, 10)  # its uncompressed size
    with pytest.raises(RejectedVerdict, match=r"cannot be read from the zip|inflates"):
        inspect_zip(bytes(data), "artifact")


def test_annotation_paths_are_exactly_the_pr_files() -> None:
    from fasttrack.github.publish import annotation_path

    files = frozenset({"vllm/a.py", "vllm/b c.py"})
    assert annotation_path("vllm/a.py", files) == "vllm/a.py"
    assert annotation_path("vllm/b c.py", files) == "vllm/b c.py"
    for bad in ("vllm/../vllm/a.py", "/vllm/a.py", "vllm/c.py", "vllm\\a.py", "", None, "./vllm/a.py"):
        assert annotation_path(bad, files) is None, bad
