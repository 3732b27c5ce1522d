"""Envelope rules (FT2xx): each with a manifest that passes and one that fails, on Contexts built directly
(a contribution written into a temporary head directory; no git, no pipeline)."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import Manifest, load_manifest
from fasttrack.policy import Policy, load_policy
from fasttrack.rules import envelope as envelope_rules

REPO = Path(__file__).resolve().parents[1]
POLICY = REPO / "policies" / "vllm.toml"
CONTRIB = "kernels/kimi_k3"
RULES = {r.code: r for r in envelope_rules.catalogue.rules}

MANIFEST: dict[str, Any] = {
    "schema_version": 1,
    "contribution": {"name": "kimi_k3", "model": "kimi_k3",
                     "target_path": "vllm/models/kimi_k3/nvidia/specialized_decode/hopper"},
    "envelope": {"hardware": [{"name": "NVIDIA H200", "compute_capability": "9.0"}], "tp": [1],
                 "batch": {"min": 1, "max": 64}, "context": {"min": 1, "max": 32768},
                 "dtypes": ["bfloat16"], "cuda_graph": "full", "grid_batches": [8, 32],
                 "grid_contexts": [4096]},
    "fallback": {"metric": "fasttrack_kimi_k3_fallback_total", "stock_path": "kimi_k3.stock:forward",
                 "guard": "kimi_k3.guard:decide"},
    "evidence": {"kernel_tests": ["tests/test_gpu.py"]},
    "trace": {"smoke": "kimi_k3.smoke:run", "guard_input": "kimi_k3.smoke:meta"},
    "claims": [{"name": "fused-b1", "min_speedup": 1.9, "gpu": "NVIDIA H200", "tp": 1, "batch": 1,
                "context": 4096}],
}

GUARD = """
    from prometheus_client import Counter

    FALLBACKS = Counter("fasttrack_kimi_k3_fallback", "fallbacks to stock", ["reason"])

    def decide(batch: int) -> str:
        if batch > 64:
            FALLBACKS.labels(reason="batch").inc()
            return "stock"
        return "fused"
    """
STOCK = """
    def forward(x):
        return x
    """


def manifest_with(**changes: Any) -> Manifest:
    """The reference-like manifest with dotted-path overrides, e.g. {"envelope.batch.max": 512}."""
    data = copy.deepcopy(MANIFEST)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.replace("__", ".").split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return Manifest.model_validate(data)


def toml_text(manifest: Manifest) -> str:
    """A TOML rendering good enough for the line hints (tables and keys on their own lines)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return str(v)

    data = manifest.model_dump(mode="json")
    lines = [f"schema_version = {data.pop('schema_version')}"]
    claims = data.pop("claims")
    for table, body in data.items():
        if body is None:
            continue  # an optional table left out ([trace])
        lines.append(f"[{table}]")
        lines += [f"{k} = {value(v)}" for k, v in body.items() if v is not None]
    for claim in claims:
        lines.append("[[claims]]")
        lines += [f"{k} = {value(v)}" for k, v in claim.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)


def make_ctx(tmp_path: Path, policy: Policy, manifest: Manifest | None, *,
             files: dict[str, str] | None = None, mode: str = "contribution") -> Context:
    contribution = {"__init__.py": "", "guard.py": GUARD, "stock.py": STOCK,
                    "smoke.py": "def run():\n    pass\n\n\ndef meta(point):\n    return point\n"} \
        if files is None else files
    for rel, text in contribution.items():
        p = tmp_path / CONTRIB / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    if manifest is not None:
        (tmp_path / CONTRIB / "fasttrack.toml").write_text(toml_text(manifest))
    return Context(policy=policy, policy_path=POLICY, mode=mode, head_dir=tmp_path,  # type: ignore[arg-type]
                   changes=(), model="kimi_k3", manifest=manifest,
                   manifest_path=f"{CONTRIB}/fasttrack.toml" if manifest is not None else None,
                   contribution_dir=CONTRIB if manifest is not None or mode == "contribution" else None)


def check(code: str, ctx: Context) -> list[Finding]:
    return RULES[code].run(gather_facts(ctx))


def test_the_reference_like_manifest_passes_every_rule(tmp_path: Path, policy: Policy) -> None:
    ctx = make_ctx(tmp_path, policy, manifest_with())
    assert [f for r in envelope_rules.catalogue.rules for f in r.run(gather_facts(ctx))] == []


def test_the_real_reference_manifest_passes_every_rule(policy: Policy) -> None:
    """kernels/kimi_k3/fasttrack.toml itself, judged in place against policies/vllm.toml."""
    path = REPO / CONTRIB / "fasttrack.toml"
    if not path.is_file():
        pytest.skip("the reference contribution's manifest is not in this checkout yet")
    ctx = Context(policy=policy, policy_path=POLICY, mode="contribution", head_dir=REPO, changes=(),
                  model="kimi_k3", manifest=load_manifest(path), manifest_path=f"{CONTRIB}/fasttrack.toml",
                  contribution_dir=CONTRIB)
    assert [f for r in envelope_rules.catalogue.rules for f in r.run(gather_facts(ctx))] == []


def test_ft200_manifest_missing(tmp_path: Path, policy: Policy) -> None:
    assert check("FT200", make_ctx(tmp_path / "ok", policy, manifest_with())) == []
    found = check("FT200", make_ctx(tmp_path / "bad", policy, None, mode="range"))
    assert [(f.code, f.severity) for f in found] == [("FT200", Severity.ERROR)]
    assert found[0].fix and "fasttrack.toml" in found[0].fix
    assert "vllm/models/kimi_k3/" in found[0].fix and "[envelope]" in found[0].fix
    in_contrib = check("FT200", make_ctx(tmp_path / "contrib", policy, None, mode="contribution"))
    assert in_contrib[0].path == f"{CONTRIB}/fasttrack.toml"


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"envelope.hardware": [{"name": "NVIDIA H200", "compute_capability": "9.0"},
                            {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
                            {"name": "NVIDIA B200", "compute_capability": "10.0"},
                            {"name": "NVIDIA GB200", "compute_capability": "10.0"},
                            {"name": "NVIDIA GB300", "compute_capability": "10.3"}]},
     "envelope.hardware", "5 GPU kinds"),
    ({"envelope.hardware.0.name": "NVIDIA H20"}, "envelope.hardware[0].name", "unknown GPU"),
    ({"envelope.hardware.0.compute_capability": "10.0"}, "envelope.hardware[0].compute_capability",
     "compute capability 9.0"),
    ({"envelope.hardware": [{"name": "NVIDIA H200", "compute_capability": "9.0"},
                            {"name": "NVIDIA H200", "compute_capability": "9.0"}]},
     "envelope.hardware[1].name", "listed twice"),
])
def test_ft201_hardware(tmp_path: Path, policy: Policy, changes: dict[str, Any], field: str,
                        words: str) -> None:
    assert check("FT201", make_ctx(tmp_path / "ok", policy, manifest_with())) == []
    found = check("FT201", make_ctx(tmp_path / "bad", policy, manifest_with(**changes)))
    assert [f.message.split(":")[0] for f in found] == [field]
    assert words in found[0].message and found[0].path == f"{CONTRIB}/fasttrack.toml" and found[0].fix


@pytest.mark.parametrize(("tp", "words"), [([1, 3], "not an allowed size"), ([1, 16], "NVLink domain")])
def test_ft202_tensor_parallel(tmp_path: Path, policy: Policy, tp: list[int], words: str) -> None:
    ok = manifest_with(**{"envelope.tp": [1, 2, 8]})
    assert check("FT202", make_ctx(tmp_path / "ok", policy, ok)) == []
    found = check("FT202", make_ctx(tmp_path / "bad", policy, manifest_with(**{"envelope.tp": tp})))
    assert [f.message.split(":")[0] for f in found] == ["envelope.tp[1]"] and words in found[0].message


def test_ft203_pipeline_and_expert_parallel(tmp_path: Path, policy: Policy) -> None:
    assert check("FT203", make_ctx(tmp_path / "ok", policy, manifest_with(**{"envelope.pp": [1]}))) == []
    bad = manifest_with(**{"envelope.pp": [1, 2], "envelope.expert_parallel": True})
    found = check("FT203", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.pp", "envelope.expert_parallel"]
    allowing = policy.model_copy(update={"envelope": policy.envelope.model_copy(
        update={"allow_pipeline_parallel": True, "allow_expert_parallel": True})})
    assert check("FT203", make_ctx(tmp_path / "allowed", allowing, bad)) == []


def test_ft204_batch(tmp_path: Path, policy: Policy) -> None:
    limit = policy.envelope.max_batch
    ok = manifest_with(**{"envelope.batch.max": limit})
    assert check("FT204", make_ctx(tmp_path / "ok", policy, ok)) == []
    bad = manifest_with(**{"envelope.batch.max": limit + 1})
    found = check("FT204", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.batch.max"]
    # the line hint points at the batch key of [envelope]
    text = (tmp_path / "bad" / CONTRIB / "fasttrack.toml").read_text().splitlines()
    assert found[0].line is not None and text[found[0].line - 1].startswith("batch =")


def test_ft205_context(tmp_path: Path, policy: Policy) -> None:
    limit = policy.envelope.max_context
    ok = manifest_with(**{"envelope.context.max": limit})
    assert check("FT205", make_ctx(tmp_path / "ok", policy, ok)) == []
    bad = manifest_with(**{"envelope.context.max": limit * 2})
    found = check("FT205", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.context.max"]


def test_ft206_dtypes(tmp_path: Path, policy: Policy) -> None:
    ok = manifest_with(**{"envelope.dtypes": ["bfloat16", "fp8"]})
    assert check("FT206", make_ctx(tmp_path / "ok", policy, ok)) == []
    bad = manifest_with(**{"envelope.dtypes": ["bfloat16", "float64", "bfloat16"]})
    found = check("FT206", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.dtypes[1]", "envelope.dtypes[2]"]
    assert "float64" in found[0].message and "twice" in found[1].message


def test_ft207_cuda_graph(tmp_path: Path, policy: Policy) -> None:
    assert check("FT207", make_ctx(tmp_path / "ok", policy, manifest_with())) == []
    only_full = policy.model_copy(update={"envelope": policy.envelope.model_copy(
        update={"cuda_graph_modes": ["full"]})})
    bad = manifest_with(**{"envelope.cuda_graph": "none"})
    found = check("FT207", make_ctx(tmp_path / "bad", only_full, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.cuda_graph"]


def test_ft208_spec_decode(tmp_path: Path, policy: Policy) -> None:
    limit = policy.envelope.max_spec_decode_width
    ok = manifest_with(**{"envelope.spec_decode_widths": [1, limit]})
    assert check("FT208", make_ctx(tmp_path / "ok", policy, ok)) == []
    bad = manifest_with(**{"envelope.spec_decode_widths": [1, limit + 1]})
    found = check("FT208", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == ["envelope.spec_decode_widths[1]"]


def test_ft209_grid(tmp_path: Path, policy: Policy) -> None:
    ok = manifest_with()
    # batches {1, 2, 8, 32, 64} x contexts {1, 4096, 32768} x 1 GPU x 1 TP x 1 dtype x 1 width
    assert envelope_rules.grid_size(ok) == 15
    assert check("FT209", make_ctx(tmp_path / "ok", policy, ok)) == []
    wide = manifest_with(**{"envelope.grid_batches": list(range(1, 65)),
                            "envelope.grid_contexts": list(range(1, 32769, 4096)),
                            "envelope.tp": [1, 2, 4, 8], "envelope.dtypes": ["bfloat16", "fp8"]})
    n = envelope_rules.grid_size(wide)
    assert n == 64 * 9 * 4 * 2 > policy.envelope.max_grid_points
    found = check("FT209", make_ctx(tmp_path / "bad", policy, wide))
    assert [f.message.split(":")[0] for f in found] == ["envelope"] and str(n) in found[0].message


@pytest.mark.parametrize(("changes", "files", "field", "words"), [
    ({"fallback.guard": "kimi_k3.nowhere:decide"}, None, "fallback.guard", "not a file of the contribution"),
    ({"fallback.guard": "kimi_k3.guard:choose"}, None, "fallback.guard", "no top-level 'choose'"),
    ({"fallback.stock_path": "kimi_k3.stock"}, None, "fallback.stock_path", "not `module:callable`"),
    ({"fallback.stock_path": "vllm.models.kimi_k3.nvidia.model:forward"},
     None, "fallback.stock_path", "not a file of the contribution"),
    ({}, {"__init__.py": "", "guard.py": "def decide():\n    return 'stock'\n", "stock.py": STOCK},
     "fallback.metric", "does not appear"),
    ({}, {"__init__.py": "", "stock.py": STOCK,
          "guard.py": "NAME = 'fasttrack_kimi_k3_fallback_total'\ndef decide():\n    pass\n"},
     "fallback.metric", "no prometheus_client.Counter"),
    ({}, {"__init__.py": "", "guard.py": "from collections import Counter\n"
          "C = Counter('fasttrack_kimi_k3_fallback_total')\ndef decide():\n    pass\n", "stock.py": STOCK},
     "fallback.metric", "no prometheus_client.Counter"),
    ({}, {"__init__.py": "", "guard.py": "def decide():\n    pass\n", "stock.py": STOCK,
          "tests/test_guard.py": GUARD}, "fallback.metric", "does not appear"),
    ({}, {"__init__.py": "", "guard.py": "def decide(:\n", "stock.py": STOCK}, "fallback.guard",
     "does not parse"),
])
def test_ft210_fallback(tmp_path: Path, policy: Policy, changes: dict[str, Any],
                        files: dict[str, str] | None, field: str, words: str) -> None:
    assert check("FT210", make_ctx(tmp_path / "ok", policy, manifest_with())) == []
    found = check("FT210", make_ctx(tmp_path / "bad", policy, manifest_with(**changes), files=files))
    fields = [f.message.split(":")[0] for f in found]
    assert field in fields, found
    assert words in found[fields.index(field)].message


def test_ft210_accepts_the_other_forms_of_a_real_fallback(tmp_path: Path, policy: Policy) -> None:
    files = {
        "__init__.py": "",
        # a counter named through a module constant, created with the module-qualified class, with the
        # full name (prometheus_client keeps a name that already ends in _total)
        "metrics.py": "import prometheus_client as pc\nMETRIC = 'fasttrack_kimi_k3_fallback_total'\n"
                      "FALLBACKS = pc.Counter(METRIC, 'fallbacks', ['reason'])\n",
        # a guard re-exported from a package, defined under a top-level `if`
        "guard/__init__.py": "from .impl import decide\n",
        "guard/impl.py": "def decide():\n    return 'fused'\n",
        "stock.py": "import sys\nif sys.version_info >= (3, 11):\n    def forward(x):\n        return x\n",
    }
    assert check("FT210", make_ctx(tmp_path, policy, manifest_with(), files=files)) == []


def test_ft210_module_paths_relative_to_the_contribution(tmp_path: Path, policy: Policy) -> None:
    # `guard:decide` (importable with the contribution itself on sys.path) resolves too
    ok = manifest_with(**{"fallback.guard": "guard:decide", "fallback.stock_path": "stock:forward"})
    assert check("FT210", make_ctx(tmp_path, policy, ok)) == []


@pytest.mark.parametrize(("claim", "field"), [
    ({"gpu": "NVIDIA B200"}, "claims[0].gpu"),
    ({"tp": 2, "gpus": 2}, "claims[0].tp"),
    ({"batch": 128}, "claims[0].batch"),
    ({"context": 65536}, "claims[0].context"),
    ({"dtype": "fp8"}, "claims[0].dtype"),
])
def test_ft211_claims(tmp_path: Path, policy: Policy, claim: dict[str, Any], field: str) -> None:
    assert check("FT211", make_ctx(tmp_path / "ok", policy, manifest_with())) == []
    bad = manifest_with(**{f"claims.0.{k}": v for k, v in claim.items()})
    found = check("FT211", make_ctx(tmp_path / "bad", policy, bad))
    assert [f.message.split(":")[0] for f in found] == [field]
    assert found[0].line is not None  # points into the [[claims]] table


def test_ft211_gpus_below_tp(tmp_path: Path, policy: Policy) -> None:
    two = manifest_with(**{"envelope.tp": [1, 2], "claims.0.tp": 2, "claims.0.gpus": 1})
    found = check("FT211", make_ctx(tmp_path, policy, two))
    assert [f.message.split(":")[0] for f in found] == ["claims[0].gpus"]


def test_rules_without_a_manifest_leave_it_to_ft200(tmp_path: Path, policy: Policy) -> None:
    ctx = make_ctx(tmp_path, policy, None, mode="range")
    found = [f for r in envelope_rules.catalogue.rules for f in r.run(gather_facts(ctx))]
    assert [f.code for f in found] == ["FT200"]


def test_ft210_in_range_mode_the_contribution_package_name_maps_to_its_directory(tmp_path: Path,
                                                                                 policy: Policy) -> None:
    """In the engine tree the contribution directory is its target_path (.../hopper), not `kimi_k3/`;
    `kimi_k3.guard:decide` still names hopper/guard.py."""
    target = MANIFEST["contribution"]["target_path"]
    for rel, text in {"__init__.py": "", "guard.py": GUARD, "stock.py": STOCK}.items():
        (tmp_path / target / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target / rel).write_text(textwrap.dedent(text))
    m = manifest_with()
    ctx = Context(policy=policy, policy_path=POLICY, mode="range", head_dir=tmp_path, changes=(),
                  model="kimi_k3", manifest=m, manifest_path=f"{target}/fasttrack.toml",
                  contribution_dir=target)
    assert check("FT210", ctx) == []
    (tmp_path / target / "guard.py").unlink()  # the guard, and the counter it created, are gone
    assert [f.message.split(":")[0] for f in check("FT210", ctx)] == ["fallback.guard", "fallback.metric"]
