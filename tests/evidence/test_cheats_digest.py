"""The cheat corpus for "the statement binds what ran" (issue 12, item 4): one test per hole.

Each cheat is made on an honest, signed toy bundle (bundle_factory) and must fail with the right code;
the untouched toy passes. Holes: a file swapped for a symlink with the same text, bytecode planted in
`__pycache__/` or beside the sources, a module hidden in the contribution's `evidence/` directory, duplicate
JSON keys, null (or defaulted) required fields, and an old-format statement read as tampered.
"""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_factory import HAVE_SSH_KEYGEN, BundleFixture, codes, errors, new_fixture, run_all, session_key

from fasttrack.context import Context
from fasttrack.errors import InputError
from fasttrack.evidence.digest import contribution_digest, digest_of_listing_v1
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding
from fasttrack.rules import binding

pytestmark = pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)")
TAG = sys.implementation.cache_tag


def judge(ctx: Context) -> list[Finding]:
    """The evidence rules and FT330, as verify runs them."""
    return run_all(ctx) + [f for r in binding.catalogue.rules for f in r.run(gather_facts(ctx))]


def collected(tmp_path: Path, files: dict[str, bytes | str]) -> BundleFixture:
    """An honest bundle collected (and signed) over the toy contribution plus `files`."""
    fx = BundleFixture(tmp_path, session_key())
    for rel, data in files.items():
        p = fx.contrib / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
    fx.data = fx.good_statement()
    fx.write_and_sign()
    return fx


def run_python(cwd: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def test_the_honest_toy_passes(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    assert errors(judge(fx.context())) == []


def test_symlink_swapped_for_a_file_with_the_same_text(tmp_path: Path) -> None:
    # Format 1 hashed a symlink as sha256("symlink:" + target): a regular file holding exactly that text had
    # the same entry, so a reviewed data file could become a link to anything after collection.
    target = str(tmp_path / "outside" / "evil.py")
    text = ("symlink:" + target).encode()
    fx = collected(tmp_path, {"table.txt": text})
    assert hashlib.sha256(text).hexdigest() == hashlib.sha256(b"symlink:" + os.fsencode(target)).hexdigest()
    (fx.contrib / "table.txt").unlink()
    os.symlink(target, fx.contrib / "table.txt")
    found = judge(fx.context())
    assert codes(errors(found)) == {"FT302"}
    assert any("changed: table.txt" in f.message for f in found if f.code == "FT302")


def test_file_swapped_for_a_symlink_to_the_same_bytes(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    outside = tmp_path / "copy_of_kernel.py"
    outside.write_bytes((fx.contrib / "kernel.py").read_bytes())  # same bytes today, anything tomorrow
    (fx.contrib / "kernel.py").unlink()
    os.symlink(outside, fx.contrib / "kernel.py")
    assert codes(errors(judge(fx.context()))) == {"FT302"}


def _planted_pyc(fx: BundleFixture, evil_source: str) -> Path:
    """Bytecode of `evil_source` in __pycache__/ that Python loads in place of kernel.py (unchecked hash)."""
    evil = fx.root / "evil" / "kernel.py"
    evil.parent.mkdir(parents=True, exist_ok=True)
    evil.write_text(evil_source)
    pyc = fx.contrib / "__pycache__" / f"kernel.{TAG}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    py_compile.compile(str(evil), cfile=str(pyc), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return pyc


def test_bytecode_planted_in_pycache(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    before = contribution_digest(fx.contrib).sha256
    _planted_pyc(fx, "def fused(x):\n    return x * 3\n")
    # The hole is real: Python runs the planted bytecode, not the reviewed source ...
    assert run_python(fx.contrib, "import kernel; print(kernel.fused(2))") == "6"
    # ... the digest (a cache is not content) does not move, so only FT330 can see it.
    assert contribution_digest(fx.contrib).sha256 == before
    found = judge(fx.context())
    assert codes(errors(found)) == {"FT330"}
    [f] = [f for f in found if f.code == "FT330"]
    assert f.path == f"kernels/demo/__pycache__/kernel.{TAG}.pyc"
    assert "not kernel.py's compiled code" in f.message


def test_faithful_bytecode_in_pycache_is_not_a_finding(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    src = fx.contrib / "kernel.py"
    for mode in py_compile.PycInvalidationMode:  # what an honest import or compileall writes
        pyc = fx.contrib / "__pycache__" / f"kernel.{TAG}.pyc"
        py_compile.compile(str(src), cfile=str(pyc), doraise=True, invalidation_mode=mode)
        assert errors(judge(fx.context())) == [], mode


def test_a_module_in_pycache_and_in_a_cache_dir(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    (fx.contrib / "__pycache__").mkdir()
    (fx.contrib / "__pycache__" / "helper.py").write_text("X = 1\n")  # import demo.__pycache__.helper
    (fx.contrib / ".pytest_cache").mkdir()
    (fx.contrib / ".pytest_cache" / "sitecustomize.py").write_text("X = 1\n")
    found = [f for f in judge(fx.context()) if f.code == "FT330"]
    assert {f.path for f in found} == {"kernels/demo/__pycache__/helper.py",
                                       "kernels/demo/.pytest_cache/sitecustomize.py"}


def test_hash_based_bytecode_of_another_python_cannot_be_checked(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    pyc = _planted_pyc(fx, "def fused(x):\n    return x * 3\n")
    pyc.rename(pyc.with_name("kernel.cpython-399.pyc"))
    assert codes(errors(judge(fx.context()))) == {"FT330"}


def test_sourceless_bytecode_beside_the_sources(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    evil = fx.root / "impl.py"
    evil.write_text("def fused(x):\n    return x * 3\n")
    py_compile.compile(str(evil), cfile=str(fx.contrib / "impl.pyc"), doraise=True)
    assert run_python(fx.contrib, "import impl; print(impl.fused(2))") == "6"  # importable without source
    found = judge(fx.context())
    assert codes(errors(found)) == {"FT302"}
    assert any("added: impl.pyc" in f.message for f in found if f.code == "FT302")


def test_module_hidden_in_the_contributions_evidence_dir(tmp_path: Path) -> None:
    # Format 1 left a top-level evidence/ directory out entirely: the kernel could import its real code
    # from there and change it after collection.
    fx = collected(tmp_path, {"kernel.py": "from evidence.impl import fused\n",
                              "evidence/impl.py": "def fused(x):\n    return x * 2\n"})
    assert "evidence/impl.py" in contribution_digest(fx.contrib).files
    (fx.contrib / "evidence" / "impl.py").write_text("def fused(x):\n    return x * 3\n")
    assert run_python(fx.contrib, "import kernel; print(kernel.fused(2))") == "6"
    found = judge(fx.context())
    assert codes(errors(found)) == {"FT302"}
    assert any("changed: evidence/impl.py" in f.message for f in found if f.code == "FT302")


def test_bundle_files_inside_the_contribution_are_still_not_content(tmp_path: Path) -> None:
    fx = collected(tmp_path, {})
    before = contribution_digest(fx.contrib).sha256
    for name in ("statement.json", "statement.json.sig", "pytest.log", "sub/bench.log"):
        p = fx.contrib / "evidence" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
    assert contribution_digest(fx.contrib).sha256 == before
    (fx.contrib / "evidence" / "sub" / "__init__.py").write_text("")
    assert contribution_digest(fx.contrib).sha256 != before


def test_symlinked_package_in_the_evidence_dir(tmp_path: Path) -> None:
    pkg = tmp_path / "elsewhere" / "impl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def fused(x):\n    return x * 2\n")
    fx = collected(tmp_path, {"kernel.py": "from evidence.impl import fused\n"})
    (fx.contrib / "evidence").mkdir()
    os.symlink(pkg, fx.contrib / "evidence" / "impl")  # a name with no code suffix, importable all the same
    assert run_python(fx.contrib, "import kernel; print(kernel.fused(2))") == "4"
    assert codes(errors(judge(fx.context()))) == {"FT302"}


def _sign_raw(fx: BundleFixture, raw: bytes) -> None:
    fx.write(raw)
    fx.sign()


def test_duplicate_keys_in_a_signed_statement(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    raw = (json.dumps(fx.data, indent=2, sort_keys=True) + "\n").encode()
    # Python's json keeps the last copy, other readers the first: the signed bytes say two things.
    dup = raw.replace(b'"model": "demo"', b'"model": "other",\n    "model": "demo"', 1)
    assert dup != raw
    _sign_raw(fx, dup)
    found = judge(fx.context())
    assert "FT301" in codes(errors(found))
    assert any("statement.json repeats a key" in f.message and "'model'" in f.message for f in found)


def test_sign_refuses_duplicate_keys(tmp_path: Path) -> None:
    from fasttrack.evidence.sign_cli import sign_command

    fx = new_fixture(tmp_path)
    raw = (json.dumps(fx.data, indent=2, sort_keys=True) + "\n").encode()
    fx.write(raw.replace(b'"hostname": "gpu-box"', b'"hostname": "a", "hostname": "gpu-box"', 1))
    with pytest.raises(InputError, match=r"repeats a key .*'hostname'"):
        sign_command(fx.bundle, key=fx.key, principal="alice@example.com")


NULLS = {
    "collected_at": ("predicate.collected_at", "must not be null"),
    "manifest_sha256": ("predicate.manifest_sha256", "must not be null"),
    "environment.l2_bytes": ("predicate.environment.l2_bytes", "must not be null on a GPU"),
    "benchmarks.0.accuracy.fused.checked": ("predicate.benchmarks[0].accuracy.fused.checked",
                                            "must not be null"),
}


@pytest.mark.parametrize("where", sorted(NULLS))
def test_null_required_fields(tmp_path: Path, where: str) -> None:
    fx = new_fixture(tmp_path)
    node = fx.pred
    *path, last = where.split(".")
    for key in path:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = None
    fx.write_and_sign()
    found = judge(fx.context())
    field, text = NULLS[where]
    assert any(f.code == "FT301" and f.message.startswith(field) and text in f.message for f in found), found


def test_accuracy_check_count_may_not_default(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    del fx.pred["benchmarks"][1]["accuracy"]["compile"]["checked"]  # would read as 1 check
    fx.write_and_sign()
    found = judge(fx.context())
    assert any(f.code == "FT301" and "benchmarks[1].accuracy.compile.checked: missing" in f.message
               for f in found)


def test_null_l2_on_cpu_is_allowed(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    fx.pred["environment"].update(compute_capability="0.0", gpu_name="cpu", l2_bytes=None)
    fx.write_and_sign()
    assert not [f for f in judge(fx.context()) if "l2_bytes" in f.message]


def test_old_format_statement_is_stale_not_tampered(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path)
    v1 = {}
    for rel in fx.pred["files"]:
        p = fx.contrib / rel
        v1[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    fx.pred["files"] = v1
    fx.data["subject"][0]["digest"]["sha256"] = digest_of_listing_v1(v1)
    fx.write_and_sign()
    found = [f for f in judge(fx.context()) if f.code == "FT302"]
    assert len(found) == 1
    assert "content-digest format 1" in found[0].message and "altered" not in found[0].message

