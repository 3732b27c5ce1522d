"""One fixture pair per rule of the catalogue: an input the rule passes and one it fails.

The pairs reuse each family's own test fixtures (the confinement, envelope, escape, blast-radius, zone and
bundle factories). A rule without a pair fails `test_every_rule_has_a_pair_or_a_declared_exemption`,
unless the catalogue (`fasttrack/rules/catalogue.py`, `fixture_exempt`) says why it has none; exempt
rules are skipped here with that reason, so the run counts them.

A pair holds when the failing input yields a finding of the rule at its declared default severity and the
passing input yields none at error or warning severity.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "evidence"))  # the bundle factory and its cases

import test_blast_links as links
import test_blast_rules as blast
import test_escapes as esc
import test_rules_confinement as conf
import test_rules_envelope as env
import test_rules_evidence as ev_cases
import test_rules_integrity as integ
import test_rules_yardstick as yard_cases
import test_zones_registry as zones
from blast_fake_tree import FILES as BLAST_FILES
from bundle_factory import HAVE_SSH_KEYGEN, new_fixture
from git_helpers import GitRepo, Symlink

from fasttrack.changes.model import Change, Hunk
from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.trace.facts import CallResult, Effect, EffectKind, TraceFacts, TraceStatus
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Severity
from fasttrack.manifest import Manifest
from fasttrack.policy import load_policy
from fasttrack.rules import all_rules
from fasttrack.verdict import ChangeStatus

Build = Callable[[Path], Context]
K3 = "vllm/models/kimi_k3"
K3_FILE = f"{K3}/nvidia/k3.py"


@dataclass(frozen=True)
class Pair:
    passing: Build
    failing: Build
    needs_ssh_keygen: bool = False


# ----------------------------------------------------------------------------------------- builders

def _range(base: dict[str, object], head: dict[str, object], policy: Path = zones.POLICY_PATH) -> Build:
    """A two-commit git repository (base, then head), judged as the range HEAD~1..HEAD."""
    def build(tmp: Path) -> Context:
        path = tmp / "repo"
        path.mkdir(parents=True)
        repo = GitRepo(path)
        repo.git("init", "-q", "-b", "main")
        repo.git("config", "core.symlinks", "true")
        repo.commit(base, message="base")  # type: ignore[arg-type]
        repo.commit(head, message="head")  # type: ignore[arg-type]
        return build_context(VerifyOptions(repo=path, base="HEAD~1", head="HEAD", policy=policy))
    return build


def _conf(changes: list[Change], **kw: object) -> Build:
    return lambda tmp: conf.make_ctx(changes, **kw)  # type: ignore[arg-type]


def _envelope(**changes: object) -> Build:
    policy = load_policy(env.POLICY)
    return lambda tmp: env.make_ctx(tmp, policy, env.manifest_with(**changes))


def _envelope_policy(update: dict[str, object], **changes: object) -> Build:
    policy = load_policy(env.POLICY)
    policy = policy.model_copy(update={"envelope": policy.envelope.model_copy(update=update)})
    return lambda tmp: env.make_ctx(tmp, policy, env.manifest_with(**changes))


def _escape(source: str) -> Build:
    policy = load_policy(esc.POLICY)
    return lambda tmp: esc.make_ctx(tmp, policy, {K3_FILE: source})


def _blast(path: str) -> Build:
    return lambda tmp: blast.ctx_for(blast.write_tree(tmp / "head"), path)


def _parent(head: str) -> Build:
    path = "vllm/models/alpha/private.py"
    return lambda tmp: links.ctx_for(tmp, path, head, BLAST_FILES[path])


def _no_radius(tmp: Path) -> Context:
    return Context(policy=blast.make_policy(), policy_path=Path("policy.toml"), mode="range", head_dir=tmp,
                   changes=(Change(status=ChangeStatus.MODIFIED, path="vllm/models/alpha/private.py"),),
                   model="alpha")


def _trace(status: TraceStatus = TraceStatus.OK, *effects: Effect, reason: str = "") -> Build:
    """The effect-trace rules judge what the trace saw (TraceFacts); the tracer is tests/test_trace.py's."""
    facts = TraceFacts(status=status, reason=reason, modules=("vllm.models.kimi_k3.nvidia.k3",),
                       effects=effects)
    return lambda tmp: conf.make_ctx([conf.added(K3_FILE)], trace=facts)


def _calls(ok: bool) -> Build:
    """What the trace's calls of the manifest's entry points returned (FT138)."""
    call = CallResult(name="guard outside (batch)", ok=ok,
                      detail="" if ok else "the guard answered fused at batch 65 (outside)")
    facts = TraceFacts(status=TraceStatus.OK, modules=("vllm.models.kimi_k3.nvidia.k3",), calls=(call,))
    return lambda tmp: conf.make_ctx([conf.added(K3_FILE)], trace=facts)


def _effect(kind: EffectKind, *, attributed: bool = True) -> Effect:
    return Effect(kind=kind, target="vllm.model_executor.layers.linear.RowParallelLinear.forward",
                  path=K3_FILE if attributed else None, line=3 if attributed else None)


def _bundle(mutate: Callable[..., object] | None = None) -> Build:
    def build(tmp: Path) -> Context:
        fx = new_fixture(tmp)
        if mutate is not None:
            mutate(fx)
        return fx.context()
    return build


def _case(cases: list[object], code: str) -> Build:
    """The first existing attack of `code` (tests/evidence) whose finding has the rule's default severity."""
    default = _DEFAULTS[code]
    for c in cases:
        if c.code == code and c.severity is default:  # type: ignore[attr-defined]
            return _bundle(c.mutate)  # type: ignore[attr-defined]

    def none(tmp: Path) -> Context:
        raise AssertionError(f"no attack of {code} at {default.value} in tests/evidence")
    return none


def _unbound_module(fx: object) -> None:
    """A module the content digest does not bind (the FT330 cheats of tests/evidence/test_cheats_digest)."""
    contrib: Path = fx.contrib  # type: ignore[attr-defined]
    (contrib / "__pycache__").mkdir()
    (contrib / "__pycache__" / "helper.py").write_text("X = 1\n")


_DEFAULTS = {r.code: r.info.severity for r in all_rules() if r.info is not None}
_MANIFEST = Manifest.model_validate(conf.MANIFEST)
_HOOK_OK = '    "KimiK3X": ("vllm.models.kimi_k3", "KimiK3X"),'
_HOOK_BAD = '    "KimiK3X": ("vllm.model_executor.models.deepseek_v2", "X"),'


def _hook(line: str) -> Build:
    def build(tmp: Path) -> Context:
        (tmp / conf.REGISTRY).parent.mkdir(parents=True)
        (tmp / conf.REGISTRY).write_text("M = {\n" + line + "\n}\n")
        change = conf.modified(conf.REGISTRY, hunks=(Hunk(added=((2, line),), new_start=2, new_count=1),))
        return conf.make_ctx([change], tmp=tmp)
    return build


_NOVA = {"vllm/models/nova/__init__.py": "", "vllm/models/nova/model.py": "class N:\n    pass\n"}
_NOVA_ENTRY = '    "NovaForCausalLM": ("vllm.models.nova", "NovaForCausalLM"),\n'
_K3_EDIT = {f"{K3}/model.py": "class K3:\n    x = 1\n"}
_UTF7 = b"# coding: utf-7\nimport vllm.v1.sample.sampler as s\n#+AAo-s.sample = None\n"

PAIRS: dict[str, Pair] = {
    # confinement: paths (tests/test_rules_confinement.py)
    "FT100": Pair(_conf([conf.added(f"{K3}/a.py")]), _conf([])),
    "FT101": Pair(_conf([conf.added(f"{K3}/a.py")]),
                  _conf([conf.modified("vllm/model_executor/layers/fused_moe/layer.py")])),
    "FT102": Pair(_conf([conf.added(f"{K3}/sampler.py")]),
                  _conf([conf.modified("vllm/v1/sample/sampler.py")])),
    "FT103": Pair(_conf([conf.added(f"{K3}/a.py")]),
                  _conf([conf.added(f"{K3}/a.py"), conf.added("vllm/models/step5/b.py")], model=None)),
    "FT104": Pair(_hook(_HOOK_OK), _hook(_HOOK_BAD)),
    "FT105": Pair(_conf([conf.added(f"{K3}/ops_link.py", mode="120000", symlink_target="nvidia/ops.py")]),
                  _conf([conf.added(f"{K3}/sampler.py", mode="120000",
                                    symlink_target="../../v1/sample/sampler.py")])),
    "FT106": Pair(_conf([conf.added(f"{K3}/a.py")]),
                  _conf([Change(status=ChangeStatus.ADDED, path=f"{K3}/k.cubin", new_mode="100644",
                                binary=True)])),
    "FT107": Pair(_conf([conf.modified(f"{K3}/a.py")]),
                  _conf([Change(status=ChangeStatus.MODE_CHANGED, path=f"{K3}/a.py", old_mode="100644",
                                new_mode="100755")])),
    "FT108": Pair(_conf([conf.added(f"{K3}/nvidia/fast/a.py")], manifest=_MANIFEST,
                        manifest_candidates=(f"{K3}/nvidia/fast/fasttrack.toml",)),
                  _conf([conf.added(f"{K3}/a.py")],
                        manifest_candidates=(f"{K3}/amd/fasttrack.toml",
                                             f"{K3}/nvidia/fast/fasttrack.toml"))),
    "FT109": Pair(_conf([conf.added(f"{K3}/nvidia/fast/a.py")], manifest=_MANIFEST,
                        contribution_dir=f"{K3}/nvidia/fast"),
                  _conf([conf.added(f"{K3}/amd/a.py")], manifest=_MANIFEST, contribution_dir=f"{K3}/amd")),
    # confinement: blast radius (tests/test_blast_rules.py, tests/test_blast_links.py)
    "FT110": Pair(_blast("vllm/models/alpha/private.py"), _blast("vllm/models/alpha/kernels.py")),
    "FT111": Pair(_blast("vllm/models/alpha/kernels.py"), _blast("vllm/models/alpha/attn.py")),
    "FT113": Pair(_blast("vllm/models/alpha/private.py"), _no_radius),
    "FT114": Pair(_parent("X = 2\n"),
                  _parent("import os\nX = 1\nos.makedirs('/tmp/alpha', exist_ok=True)\n")),
    # confinement: escapes (tests/test_escapes.py RULE_CASES; FT146 from tests/test_escapes_fail_closed.py)
    **{code: Pair(_escape(good), _escape(bad)) for code, (bad, good) in esc.RULE_CASES.items()},
    "FT146": Pair(_escape("import torch\nok = torch.backends.cuda.flash_sdp_enabled()\n"),
                  _escape("import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n")),
    # confinement: the effect trace's findings (its facts built by hand)
    "FT130": Pair(_trace(), _trace(TraceStatus.OK, _effect(EffectKind.FOREIGN_STATE))),
    "FT131": Pair(_trace(), _trace(TraceStatus.OK, _effect(EffectKind.FOREIGN_STATE, attributed=False))),
    "FT132": Pair(_trace(), _trace(TraceStatus.FAILED, reason="timed out after 60 s")),
    "FT133": Pair(_trace(), _trace(TraceStatus.OK, _effect(EffectKind.ESCAPE))),
    "FT134": Pair(_trace(), _trace(TraceStatus.OK, _effect(EffectKind.DYNAMIC_CODE))),
    "FT138": Pair(_calls(ok=True), _calls(ok=False)),
    # confinement: source text and the repository (tests/test_source_text.py, tests/test_zones_registry.py)
    "FT135": Pair(_range(zones.ENGINE, {f"{K3}/fast.py": "# coding: utf-8\nSCALE = 'é'\n"}),
                  _range(zones.ENGINE, {f"{K3}/fast.py": _UTF7})),
    "FT136": Pair(_range(zones.ENGINE, {f"{K3}/fast.py": "X = 1\n", f"{K3}/notes.txt": "x\n"}),
                  _range(zones.ENGINE, {f"{K3}/fast.pyc": b"\x00\x01"})),
    "FT137": Pair(_range(zones.ENGINE, {f"{K3}/ops.py": "X = 1\n", f"{K3}/fast.py": Symlink("ops.py")}),
                  _range(zones.ENGINE, {f"{K3}/payload.txt": "X = 1\n",
                                        f"{K3}/fast.py": Symlink("payload.txt")})),
    "FT140": Pair(_range(zones.ENGINE, {f"{K3}/fast.py": "x = 1\n"}),
                  _range(zones.ENGINE, {f"{K3}/.gitattributes": "*.py -diff\n"})),
    "FT141": Pair(_range(zones.ENGINE, {f"{K3}/fast.py": "x = 1\n"}),
                  _range(zones.ENGINE, {**_NOVA, zones.REG: zones.with_entry(_NOVA_ENTRY)})),
    "FT142": Pair(_range(zones.ENGINE, {**_K3_EDIT, zones.REG: zones.with_entry(
                      '    "KimiK3ForCausalLM": ("vllm.models.kimi_k3", "KimiK3ForCausalLM"),\n')}),
                  _range(zones.ENGINE, {**_K3_EDIT, zones.REG: zones.with_entry(
                      '    "DeepseekV3ForConditionalGeneration": ("vllm.models.kimi_k3", '
                      '"KimiK3ForConditionalGeneration"),\n')})),
    "FT143": Pair(_range(zones.ENGINE, {f"{K3}/fast.py": "x = 1\n"}),
                  _range(zones.ENGINE, {"vllm/models/nova/model.py": "class N:\n    pass\n"})),
    # envelope (tests/test_rules_envelope.py)
    "FT200": Pair(_envelope(), lambda tmp: env.make_ctx(tmp, load_policy(env.POLICY), None, mode="range")),
    "FT201": Pair(_envelope(), _envelope(**{"envelope.hardware.0.name": "NVIDIA H20"})),
    "FT202": Pair(_envelope(**{"envelope.tp": [1, 2, 8]}), _envelope(**{"envelope.tp": [1, 16]})),
    "FT203": Pair(_envelope(**{"envelope.pp": [1]}), _envelope(**{"envelope.pp": [1, 2]})),
    "FT204": Pair(_envelope(), _envelope(**{"envelope.batch.max": 10**6})),
    "FT205": Pair(_envelope(), _envelope(**{"envelope.context.max": 10**8})),
    "FT206": Pair(_envelope(), _envelope(**{"envelope.dtypes": ["bfloat16", "float64"]})),
    "FT207": Pair(_envelope_policy({"cuda_graph_modes": ["full"]}),
                  _envelope_policy({"cuda_graph_modes": ["full"]}, **{"envelope.cuda_graph": "none"})),
    "FT208": Pair(_envelope(**{"envelope.spec_decode_widths": [1]}),
                  _envelope(**{"envelope.spec_decode_widths": [1, 10**4]})),
    "FT209": Pair(_envelope(), _envelope(**{"envelope.grid_batches": list(range(1, 65)),
                                            "envelope.grid_contexts": list(range(1, 32769, 512))})),
    "FT210": Pair(_envelope(), lambda tmp: env.make_ctx(tmp, load_policy(env.POLICY), env.manifest_with(),
                                                        files={"__init__.py": "", "stock.py": env.STOCK})),
    "FT211": Pair(_envelope(), _envelope(**{"claims.0.batch": 512})),
    "FT212": Pair(_envelope(), _envelope(trace=None)),
    # integrity (tests/test_rules_integrity.py)
    "FT401": Pair(lambda tmp: integ.ctx([f"{K3}/a.py"]), lambda tmp: integ.ctx(["policies/vllm.toml"])),
    # evidence, binding and the yardstick: the honest bundle, and the first attack of each code
    # (tests/evidence/test_rules_evidence.py, test_rules_yardstick.py, test_cheats_digest.py)
    **{code: Pair(_bundle(), _case(ev_cases.CASES + yard_cases.CASES, code), needs_ssh_keygen=True)
       for code in sorted({c.code for c in ev_cases.CASES + yard_cases.CASES})},
    "FT330": Pair(_bundle(), _bundle(_unbound_module), needs_ssh_keygen=True),
}


def _integrity_402() -> Pair:
    def harness(digest: str) -> Build:
        def build(tmp: Path) -> Context:
            fx = new_fixture(tmp)
            fx.policy_data["evidence"]["accepted_harness_digests"] = ["a" * 64]
            fx.pred["collector"]["harness_digest"] = digest
            fx.write_and_sign()
            return fx.context()
        return build
    return Pair(harness("a" * 64), harness("0" * 64), needs_ssh_keygen=True)


PAIRS["FT402"] = _integrity_402()

RULES = {r.code: r for r in all_rules()}


# ------------------------------------------------------------------------------------------- the tests

def test_every_rule_has_a_pair_or_a_declared_exemption() -> None:
    missing = [c for c, r in RULES.items() if c not in PAIRS and not r.fixture_exempt]
    assert missing == [], f"add a fixture pair here (or a declared exemption in the catalogue): {missing}"
    stale = [c for c, r in RULES.items() if c in PAIRS and r.fixture_exempt]
    assert stale == [], f"these rules have a pair: drop their fixture_exempt in the catalogue: {stale}"
    assert set(PAIRS) <= set(RULES), sorted(set(PAIRS) - set(RULES))


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_fixture_pair(code: str, tmp_path: Path, isolated_cache: Path) -> None:
    rule = RULES[code]
    if rule.fixture_exempt:
        pytest.skip(f"{code} is exempt from a fixture pair: {rule.fixture_exempt}")
    pair = PAIRS[code]
    if pair.needs_ssh_keygen and not HAVE_SSH_KEYGEN:
        pytest.skip("needs ssh-keygen (openssh-client)")
    assert rule.info is not None
    passing = [f for f in rule.run(gather_facts(pair.passing(tmp_path / "pass")))
               if f.severity is not Severity.INFO]
    assert passing == [], [(f.severity.value, f.message) for f in passing]
    failing = rule.run(gather_facts(pair.failing(tmp_path / "fail")))
    assert any(f.severity is rule.info.severity for f in failing), (
        f"{code} should say {rule.info.severity.value} (its declared default) on its failing input: "
        f"{[(f.severity.value, f.message) for f in failing]}")
    assert not any("crashed" in f.message for f in failing)


def test_exemptions_are_few_and_say_why() -> None:
    exempt = {c: r.fixture_exempt for c, r in RULES.items() if r.fixture_exempt}
    assert all(len(why or "") > 20 for why in exempt.values())
    assert len(exempt) <= 8, exempt
