"""Issue 15, item 4: the blast radius includes what Python runs, each result with the kind of its link.

On the fake tree (tests/blast_fake_tree.py) plus a few files: a shared module naming model code in a
string, an engine base class that registers its subclasses (and a reader of that registry), and a
metaclass that does the same. FT114 judges units that run changed code only through a parent package.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from blast_fake_tree import FILES, make_policy, write_tree

from fasttrack.changes.model import Change
from fasttrack.confinement.blast_radius import compute_blast_radius
from fasttrack.confinement.import_effects import import_effect, new_acts
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.rules.blast import catalogue, chain_text
from fasttrack.verdict import AffectedShared, BlastRadius, ChangeStatus, Witness

RULES = {r.code: r for r in catalogue.rules}

EXTRA: dict[str, str | None] = {
    "vllm/model_executor/warmup/strings.py": (
        "import sys\nimport importlib\n\n"
        "def warm():\n"
        "    m = sys.modules.get(\"vllm.models.alpha.private\")\n"
        "    k = importlib.import_module('vllm.models.alpha.kernels')\n"
        "    return m, k\n"
        "TABLE = {\"alpha\": \"vllm.models.alpha.attn:attend\"}\n"
        "def look():\n    return sys.modules.get(\"vllm.models.alpha.chain_b\")\n"
    ),
    "vllm/model_executor/layers/plugins.py": (
        "_PLUGINS = {}\n\n"
        "class Plugin:\n"
        "    def __init_subclass__(cls, **kw):\n"
        "        super().__init_subclass__(**kw)\n"
        "        _PLUGINS[cls.__name__] = cls\n\n"
        "class Quiet:\n"
        "    def __init_subclass__(cls, **kw):\n"
        "        cls.tag = 1\n\n"
        "class Meta(type):\n"
        "    pass\n\n"
        "class Tracked(metaclass=Meta):\n"
        "    pass\n"
    ),
    "vllm/model_executor/layers/plugin_user.py": "from vllm.model_executor.layers.plugins import _PLUGINS\n",
    "vllm/model_executor/layers/plugin_other.py": "from vllm.model_executor.layers.plugins import Quiet\n",
    "vllm/models/alpha/plugin_impl.py": (
        "from vllm.model_executor.layers.plugins import Plugin, Quiet\n\n"
        "class AlphaPlugin(Plugin):\n    pass\n\n"
        "class AlphaQuiet(Quiet):\n    pass\n"
    ),
    "vllm/models/alpha/tracked_impl.py": (
        "from vllm.model_executor.layers import plugins\n\nclass T(plugins.Tracked):\n    pass\n"
    ),
    "vllm/models/alpha/quiet_impl.py": (
        "from vllm.model_executor.layers.plugins import Quiet\n"
        "from vllm.model_executor.layers.linear import Linear\n\n"
        "class A(Quiet):\n    pass\n\nclass B(Linear):\n    pass\n"
    ),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tree(tmp_path_factory.mktemp("links") / "head", EXTRA)


def radius(tree: Path, *paths: str) -> BlastRadius:
    changes = tuple(Change(status=ChangeStatus.MODIFIED, path=p) for p in paths)
    r = compute_blast_radius(make_policy(), tree, changes, "alpha", cache_dir=None)
    assert r.computed, r.note
    return r


def shared(r: BlastRadius, link: str) -> list[AffectedShared]:
    return [s for s in r.shared if s.link == link]


def test_a_module_named_in_a_string_is_an_edge(tree: Path) -> None:
    r = radius(tree, "vllm/models/alpha/private.py")
    [s] = shared(r, "names-in-string")
    assert s.module == "vllm.model_executor.warmup.strings"
    assert s.witness.chain == ["vllm.model_executor.warmup.strings", "vllm.models.alpha.private"]
    assert s.witness.lines == [5] and s.witness.function_level == [True]
    assert s.witness.links == ["names-in-string"]
    # import_module('...') and a table value "module:attr" count too
    kernels = radius(tree, "vllm/models/alpha/kernels.py")
    assert [s.module for s in shared(kernels, "names-in-string")] == ["vllm.model_executor.warmup.strings"]
    attn = radius(tree, "vllm/models/alpha/attn.py")
    assert [s.witness.lines for s in shared(attn, "names-in-string")] == [[8]]


def test_a_lookup_by_string_links_only_the_module_it_names(tree: Path) -> None:
    """strings.look() takes chain_b from sys.modules: that runs chain_b's code, not what chain_b imports
    (chain_a), so a change to chain_a does not reach strings.py; a change to chain_b does."""
    assert shared(radius(tree, "vllm/models/alpha/chain_a.py"), "names-in-string") == []
    [s] = shared(radius(tree, "vllm/models/alpha/chain_b.py"), "names-in-string")
    assert s.module == "vllm.model_executor.warmup.strings" and s.witness.lines == [10]


def test_a_registering_base_links_its_registry_and_readers(tree: Path) -> None:
    r = radius(tree, "vllm/models/alpha/plugin_impl.py")
    reg = {s.module: s for s in r.shared if s.link == "registry"}
    assert sorted(reg) == ["vllm.model_executor.layers.plugin_user", "vllm.model_executor.layers.plugins"]
    holder = reg["vllm.model_executor.layers.plugins"].witness
    assert holder.chain == ["vllm.model_executor.layers.plugins", "vllm.models.alpha.plugin_impl"]
    assert holder.links == ["registry"] and holder.lines == [3]
    reader = reg["vllm.model_executor.layers.plugin_user"].witness
    assert reader.chain == ["vllm.model_executor.layers.plugin_user", "vllm.model_executor.layers.plugins",
                            "vllm.models.alpha.plugin_impl"]
    assert "(a registry filled by) vllm.models.alpha.plugin_impl" in chain_text(reader)


def test_a_metaclass_base_counts_as_registering(tree: Path) -> None:
    r = radius(tree, "vllm/models/alpha/tracked_impl.py")
    assert [s.module for s in shared(r, "registry")] == ["vllm.model_executor.layers.plugins"]


def test_a_base_whose_hook_only_touches_the_class_is_no_registry(tree: Path) -> None:
    r = radius(tree, "vllm/models/alpha/quiet_impl.py")
    assert shared(r, "registry") == []


def ctx_for(tree: Path, path: str, head: str | None, base: str | None) -> Context:
    root = write_tree(tree, {**EXTRA, path: head} if head is not None else EXTRA)
    status = ChangeStatus.ADDED if base is None else ChangeStatus.MODIFIED
    changes = (Change(status=status, path=path),)
    policy = make_policy()
    r = compute_blast_radius(policy, root, changes, "alpha", cache_dir=None)
    return Context(policy=policy, policy_path=Path("policy.toml"), mode="range", head_dir=root,  # type: ignore[arg-type]
                   changes=changes, model="alpha", blast_radius=r,
                   base_texts={path: base} if base is not None else {})


def run(code: str, ctx: Context) -> list[Finding]:
    return RULES[code].run(gather_facts(ctx))


def test_ft114_an_honest_edit_reached_through_a_parent_package_is_an_info(tmp_path: Path) -> None:
    """private.py runs for beta and gamma only because they import modules below alpha (alpha/__init__
    imports alpha.model, which imports private): named, not blocked."""
    ctx = ctx_for(tmp_path, "vllm/models/alpha/private.py", "X = 2\n", FILES["vllm/models/alpha/private.py"])
    found = run("FT114", ctx)
    assert sorted(f.message.split(" runs ")[0].split(" (")[0] for f in found) == [
        "legacy model file gamma", "model package beta", "shared module vllm.model_executor.layers.fancy",
        "shared module vllm.model_executor.layers.lazy_user", "shared module vllm.model_executor.warmup.hub"]
    assert {f.severity for f in found} == {Severity.INFO}
    assert sum("only defines things at import" in f.message for f in found) == 4  # and the hub
    assert run("FT110", ctx) == []
    # the warm-up module naming private in a string is a real edge: FT111, not FT114
    assert [f.message.split(" (")[0] for f in run("FT111", ctx)] == [
        "shared module vllm.model_executor.warmup.strings"]


def test_ft114_new_import_time_code_is_an_error(tmp_path: Path) -> None:
    head = "import os\nX = 1\nos.makedirs('/tmp/alpha', exist_ok=True)\n"
    ctx = ctx_for(tmp_path, "vllm/models/alpha/private.py", head, FILES["vllm/models/alpha/private.py"])
    found = run("FT114", ctx)
    errors = [f for f in found if f.severity is Severity.ERROR]
    assert len(errors) == 4 and len(found) == 5  # the hub stays an info
    assert "does something at import" in errors[0].message and errors[0].fix


def test_ft114_unchanged_import_time_code_is_an_info(tmp_path: Path) -> None:
    base = "import os\nos.makedirs('/tmp/alpha', exist_ok=True)\n\ndef f():\n    return 1\n"
    head = "import os\n\nos.makedirs('/tmp/alpha', exist_ok=True)\n\ndef f():\n    return 2\n"
    ctx = ctx_for(tmp_path, "vllm/models/alpha/private.py", head, base)
    assert ctx.blast_radius.acts_at_import == {"vllm.models.alpha.private": True}
    assert {f.severity for f in run("FT114", ctx)} == {Severity.INFO}


def test_ft110_still_fails_for_a_direct_importer(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, "vllm/models/alpha/kernels.py", "def fused():\n    return 2\n",
                  FILES["vllm/models/alpha/kernels.py"])
    assert [f.severity for f in run("FT110", ctx)] == [Severity.ERROR]  # gamma imports it
    assert [f.severity for f in run("FT111", ctx)] == [Severity.ERROR]  # strings.py names it
    assert "names in a string" in run("FT111", ctx)[0].message


IMPORT_TIME: list[tuple[str, bool]] = [
    ('"""doc"""\nimport os\nfrom typing import TypeVar\nT = TypeVar("T")\nX = 1\nY: int = 2\n', False),
    ("from vllm.logger import init_logger\nlogger = init_logger(__name__)\n", False),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\n", False),
    ("try:\n    import foo\nexcept ImportError:\n    foo = None\n", False),
    ("from vllm.platforms import current_platform\nif current_platform.is_rocm():\n    from . import a\n",
     False),
    ("class A:\n    x = 1\n    def f(self):\n        return 1\n", False),
    ("import torch\ntorch.set_default_dtype(torch.float16)\n", True),
    ("from r import REG\n@REG.register\nclass A:\n    pass\n", True),
    ("class A:\n    print('hi')\n", True),
    ("for i in range(3):\n    pass\n", True),
    ("X = compute()\n", True),
    ("def f(:\n", True),
]


@pytest.mark.parametrize(("source", "acts"), IMPORT_TIME)
def test_acts_at_import_from_the_static_facts(source: str, acts: bool) -> None:
    from fasttrack.policy import BlastRadiusSpec

    assert import_effect(source, BlastRadiusSpec().inert_import_calls).acts is acts


def test_new_acts_compares_with_the_base() -> None:
    call = "import os\nos.makedirs('x')\n"
    assert new_acts(call, None) and not new_acts(call, call) and not new_acts("X = 1\n", None)
    assert new_acts(call + "os.makedirs('y')\n", call) and not new_acts("\n\n" + call, call)


def test_witness_link_defaults_keep_old_verdicts_valid() -> None:
    old = Witness.model_validate({"chain": ["a", "b"], "lines": [1], "function_level": [False]})
    assert old.link == "imports" and old.links == []
    assert AffectedShared.model_validate({"module": "a", "witness": old.model_dump()}).link == "imports"
    assert BlastRadius.model_validate({"computed": True}).acts_at_import == {}
