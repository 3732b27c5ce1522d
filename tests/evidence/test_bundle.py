"""The bundle schema (in-toto Statement + fasttrack predicate) and the loader's handling of bad bundles."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pydantic
import pytest
from bundle_factory import BundleFixture, benchmark, session_key

from fasttrack.evidence import loader
from fasttrack.evidence.bundle import (
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    Benchmark,
    Point,
    Predicate,
    Statement,
    Variant,
    new_statement,
)
from fasttrack.evidence.loader import load_evidence, parse_statement_bytes
from fasttrack.manifest import EnvelopePoint


@pytest.fixture
def fx(tmp_path: Path) -> BundleFixture:
    f = BundleFixture(tmp_path, session_key())
    f.write()
    return f


def messages(fx: BundleFixture) -> list[str]:
    ev = load_evidence(fx.bundle)
    assert ev is not None
    return [p.message for p in ev.problems]


# ------------------------------------------------------------------------------------------ schema

def test_good_statement_validates_and_roundtrips(fx: BundleFixture) -> None:
    st = Statement.model_validate(fx.data)
    assert st.type == STATEMENT_TYPE and st.predicate_type == PREDICATE_TYPE
    assert st.subject_digest == fx.data["subject"][0]["digest"]["sha256"]
    again = Statement.model_validate_json(st.to_json_bytes())
    assert again == st
    raw = st.to_json_bytes()
    assert raw.endswith(b"\n") and b'"_type": "https://in-toto.io/Statement/v1"' in raw
    assert b'"predicateType"' in raw and b"predicate_type" not in raw


def test_new_statement_builds_a_complete_statement() -> None:
    pred = Predicate(contribution="demo", model="demo")
    st = new_statement(contribution="demo", subject_sha256="a" * 64, predicate=pred)
    assert st.subject[0].name == "demo" and st.subject_digest == "a" * 64
    assert json.loads(st.to_json_bytes())["predicateType"] == PREDICATE_TYPE


def test_point_keys_match_envelope_point_keys() -> None:
    p = Point(gpu="NVIDIA H200", tp=1, batch=2, context=4096, dtype="bfloat16")
    e = EnvelopePoint(gpu="NVIDIA H200", tp=1, batch=2, context=4096, dtype="bfloat16")
    assert p.key() == e.key()
    assert p.as_dict() == e.model_dump()


def test_variant_allows_extra_samples_lists_only() -> None:
    v = Variant.model_validate({"samples_us": [1.0, 2.0], "samples_kernels": [3, 3]})
    assert v.samples() == {"samples_us": [1.0, 2.0], "samples_kernels": [3.0, 3.0]}
    with pytest.raises(pydantic.ValidationError, match="only samples_"):
        Variant.model_validate({"samples_us": [1.0], "mean_us": 1.0})
    with pytest.raises(pydantic.ValidationError, match="list of finite numbers"):
        Variant.model_validate({"samples_us": [1.0], "samples_ms": ["x"]})
    with pytest.raises(pydantic.ValidationError, match="positive"):
        Variant.model_validate({"samples_us": [0.0]})


def test_timed_benchmark_needs_protocol_and_stock() -> None:
    good = benchmark(1)
    Benchmark.model_validate(good)
    with pytest.raises(pydantic.ValidationError, match="needs its protocol"):
        Benchmark.model_validate({**good, "protocol": None})
    with pytest.raises(pydantic.ValidationError, match="'stock' variant"):
        Benchmark.model_validate({**good, "variants": {"fused": good["variants"]["fused"]}})
    skipped = Benchmark.model_validate({"point": good["point"], "not_run": "no benchmark for this point"})
    assert skipped.variants == {}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_are_rejected_everywhere(fx: BundleFixture, bad: float) -> None:
    for where in ({"max_error": bad}, {"extra": {"x": bad}}):
        with pytest.raises(pydantic.ValidationError):
            Predicate.model_validate({"kernel_tests": [{"nodeid": "t", "outcome": "passed", **where}]})
    with pytest.raises(pydantic.ValidationError, match="NaN"):
        Predicate.model_validate({"lm_eval": [{"results": {"gsm8k": {"acc": bad}}}]})


def test_paths_in_files_and_logs_must_be_relative() -> None:
    for name in ("/etc/passwd", "../x", "a/../../b", "a\\b", ""):
        with pytest.raises(pydantic.ValidationError):
            Predicate.model_validate({"logs": {name: "0" * 64}})


def test_json_schema_is_exportable() -> None:
    schema = Statement.model_json_schema(by_alias=True)
    assert "_type" in schema["properties"] and "predicateType" in schema["properties"]


# ------------------------------------------------------------------------------------------ loader

def test_no_directory_means_no_bundle(tmp_path: Path) -> None:
    assert load_evidence(tmp_path / "missing") is None


def test_empty_directory_has_no_statement_and_no_problems(tmp_path: Path) -> None:
    ev = load_evidence(tmp_path)
    assert ev is not None and ev.statement is None and ev.statement_bytes is None and ev.problems == ()


def test_loaded_bundle_has_statement_logs_and_unlisted_files(fx: BundleFixture) -> None:
    (fx.bundle / "stray.txt").write_text("x")
    ev = load_evidence(fx.bundle)
    assert ev is not None and ev.statement is not None and not ev.problems and not ev.salvaged
    assert ev.statement_bytes == (fx.bundle / "statement.json").read_bytes()
    assert ev.log_digests == {"pytest.log": fx.pred["logs"]["pytest.log"]}
    assert ev.unlisted_files == ("stray.txt",)
    assert ev.signature is None


def test_schema_problems_name_fields_and_keep_the_rest(fx: BundleFixture) -> None:
    fx.pred["kernel_tests"][0]["outcome"] = "maybe"
    fx.pred["kernel_tests"][1]["bogus"] = 1
    fx.pred["environment"]["gpu_count"] = "many"
    fx.pred["files"]["../escape"] = "0" * 64
    fx.data["extra_top"] = True
    fx.write()
    ev = load_evidence(fx.bundle)
    assert ev is not None and ev.statement is not None and ev.salvaged
    text = "\n".join(p.message for p in ev.problems)
    assert "predicate.kernel_tests[0].outcome" in text
    assert "predicate.kernel_tests[1].bogus: unknown field" in text
    assert "predicate.environment.gpu_count" in text
    assert "extra_top: unknown field" in text
    assert "../escape" in text
    p = ev.statement.predicate
    assert len(p.kernel_tests) == len(fx.pred["kernel_tests"]) - 1  # the bad record is dropped...
    assert p.kernel_tests[0].nodeid == fx.pred["kernel_tests"][1]["nodeid"]  # ...the unknown key only
    assert p.environment is None  # an invalid section is dropped whole
    assert "../escape" not in p.files and "kernel.py" in p.files
    assert len(p.benchmarks) == 3
    assert all(f.code == "FT301" and f.fix for f in ev.problems)


def test_missing_fields_are_problems(fx: BundleFixture) -> None:
    for key in ("environment", "kernel_tests", "collected_at"):
        del fx.pred[key]
    del fx.data["_type"]
    fx.write()
    text = messages(fx)
    for want in ("_type: missing", "predicate.environment: missing", "predicate.kernel_tests: missing",
                 "predicate.collected_at: missing"):
        assert want in text


@pytest.mark.parametrize(("raw", "expect"), [
    (b"", "statement.json is empty"),
    (b'{"_type": "https://in-toto.io/Statement/v1", "subject": [', "not valid JSON"),
    (b"\xff\xfe\x00", "not UTF-8"),
    (b'{"predicate": {"environment": {"gpu_count": ' + b"9" * 5000 + b"}}}", "not valid JSON"),
    (b'{"predicate": {"kernel_tests": [{"nodeid": "t", "outcome": "passed", "max_error": NaN}]}}',
     "NaN is not a JSON number"),
    (b'{"predicate": {"kernel_tests": [{"nodeid": "t", "outcome": "passed", "max_error": 1e400}]}}',
     "finite number"),
    (b'{"predicate": {"environment": {"gpu_count": 1e20}}}', "gpu_count"),
    (b"null", "must hold a JSON object, not null"),
    (b'"text"', "must hold a JSON object, not a string"),
    (b'{"predicate": [1, 2]}', "predicate"),
    (b'{"subject": {"name": "x"}}', "subject"),
    (b"[" * 100 + b"]" * 100, "nests 100 levels deep"),
    (b'{"a": "' + b"[" * 1000 + b'"}', "a: unknown field"),  # brackets inside strings do not count
])
def test_malformed_bundles_give_problems(fx: BundleFixture, raw: bytes, expect: str) -> None:
    fx.write(raw)
    text = messages(fx)
    assert any(expect in m for m in text), text


def test_oversized_statement_is_a_problem(fx: BundleFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_STATEMENT_BYTES", 1000)
    text = messages(fx)
    assert any("over the 1000-byte limit" in m for m in text)


def test_symlinked_statement_is_refused(fx: BundleFixture, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    os.replace(fx.bundle / "statement.json", real)
    os.symlink(real, fx.bundle / "statement.json")
    assert any("must be a regular file" in m for m in messages(fx))


def test_log_outside_the_bundle_is_not_followed(fx: BundleFixture, tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("x")
    (fx.bundle / "pytest.log").unlink()
    os.symlink(outside, fx.bundle / "pytest.log")
    ev = load_evidence(fx.bundle)
    assert ev is not None and ev.log_digests == {"pytest.log": None}


def test_problem_flood_is_capped(fx: BundleFixture) -> None:
    fx.pred["kernel_tests"] = [{"nodeid": f"t{i}", "outcome": "nope"} for i in range(200)]
    fx.write()
    text = messages(fx)
    assert len(text) == loader.MAX_PROBLEMS + 1 and text[-1].startswith("and ")


def test_parse_statement_bytes_matches_the_loader(fx: BundleFixture) -> None:
    st, problems = parse_statement_bytes((fx.bundle / "statement.json").read_bytes())
    assert st is not None and problems == []
    st, problems = parse_statement_bytes(b"{}")
    assert st is not None and {p.message for p in problems} >= {"_type: missing", "predicate: missing"}


def _deep(n: int) -> Any:
    out: Any = 1
    for _ in range(n):
        out = {"x": out}
    return out


def test_deep_free_form_json_is_refused_before_parsing(fx: BundleFixture) -> None:
    fx.pred["lm_eval"] = [_deep(60)]
    fx.write()
    assert any("nests" in m for m in messages(fx))


def test_fasttrack_schema_evidence_prints_the_statement_schema() -> None:
    from typer.testing import CliRunner

    from fasttrack.cli import app

    out = CliRunner().invoke(app, ["schema", "evidence"])
    assert out.exit_code == 0, out.output
    assert set(json.loads(out.output)["properties"]) == {"_type", "subject", "predicateType", "predicate"}
