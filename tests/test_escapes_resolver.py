"""The scope/taint resolver of the escape scan on its own (fasttrack.confinement.escapes.scope): what a
name or expression refers to after the binding pass, without any checker."""

from __future__ import annotations

import ast
import textwrap

import pytest

from fasttrack.confinement.escapes.scope import Resolver, _Scope
from fasttrack.policy import EscapesSpec

MODULE = "vllm.models.kimi_k3.nvidia.model"


def resolver(src: str, module: str = MODULE) -> Resolver:
    tree = ast.parse(textwrap.dedent(src))
    r = Resolver(tree, module.replace(".", "/") + ".py", {"vllm.models.kimi_k3"}, module, False, {"kimi_k3"},
                 EscapesSpec(), 0)
    r.bind_all()
    return r


def last_expr(r: Resolver, func: str | None = None) -> tuple[ast.expr, _Scope]:
    """The last statement (an expression statement) of the module or of `func`, with its scope."""
    body = r.tree.body
    scope = r.module_scope
    if func is not None:
        node = next(n for n in ast.walk(r.tree) if isinstance(n, ast.FunctionDef) and n.name == func)
        body, scope = node.body, r.scopes[node]
    stmt = body[-1]
    assert isinstance(stmt, ast.Expr)
    return stmt.value, scope


@pytest.mark.parametrize(("src", "origin", "qualname"), [
    ("import vllm.model_executor.layers.linear as L\nL.RowParallelLinear\n", "import",
     "vllm.model_executor.layers.linear.RowParallelLinear"),
    ("from vllm.config import get_current_vllm_config as g\nc = g()\nc.model_config\n", "import",
     "vllm.config.get_current_vllm_config().model_config"),
    ("from . import ops\nops.kernel\n", "import", "vllm.models.kimi_k3.nvidia.ops.kernel"),
    ("class K3:\n    pass\nK3\n", "own", f"{MODULE}.K3"),
    ("x = 1\nx\n", "local", ""),
    ("from vllm import a, b\nx = a if cond else b\nx\n", "import", "vllm.a"),
    ("from vllm import a\npair = (a, 1)\nfirst, _ = pair\nfirst\n", "import", "vllm.a"),
])
def test_names_resolve_through_bindings(src: str, origin: str, qualname: str) -> None:
    r = resolver(src)
    ref = r.resolve(*last_expr(r))
    assert ref is not None and (ref.origin, ref.qualname) == (origin, qualname)


def test_an_ordinary_parameter_depends_on_the_caller() -> None:
    r = resolver("def f(layer):\n    layer.weight\n")
    ref = r.resolve(*last_expr(r, "f"))
    assert ref is not None and ref.origin == "param"


@pytest.mark.parametrize("src", [
    "def f(vllm_config):\n    vllm_config.model_config.hf_config\n",
    "from vllm.config import VllmConfig\ndef f(c: VllmConfig | None):\n    c.model_config.hf_config\n",
    "def f(c: 'vllm.config.VllmConfig'):\n    c.model_config.hf_config\n",
])
def test_engine_parameters_resolve_to_the_engine(src: str) -> None:
    r = resolver("import vllm.config\n" + src)
    ref = r.resolve(*last_expr(r, "f"))
    assert ref is not None and ref.origin == "import" and r.foreign(ref)
    assert ref.qualname.startswith("~param.") and ref.qualname.endswith(".model_config.hf_config")


def test_engine_parameters_only_in_model_code() -> None:
    r = resolver("def f(vllm_config):\n    vllm_config.model_config\n", module="vllm.config.helpers")
    ref = r.resolve(*last_expr(r, "f"))
    assert ref is not None and ref.origin == "param"


def test_kwargs_of_an_engine_subclass_hold_engine_objects() -> None:
    r = resolver("from vllm.x import Base\nclass K(Base):\n"
                 "    def f(self, **kw):\n        kw['vllm_config']\n")
    ref = r.resolve(*last_expr(r, "f"))
    assert ref is not None and r.tainted(ref) is not None
    own = resolver("class K:\n    def f(self, **kw):\n        kw['vllm_config']\n")
    ref = own.resolve(*last_expr(own, "f"))
    assert ref is not None and own.tainted(ref) is None


def test_a_shallow_copy_is_new_but_shares_its_attributes() -> None:
    r = resolver("import copy\ndef f(config):\n    c = copy.copy(config)\n    c\n")
    ref = r.resolve(*last_expr(r, "f"))
    assert ref is not None and ref.origin == "local" and not r.foreign(ref)
    r2 = resolver("import copy\ndef f(config):\n    c = copy.copy(config)\n    c.sub\n")
    sub = r2.resolve(*last_expr(r2, "f"))
    assert sub is not None and r2.foreign(sub) and sub.qualname == "~param.config.sub"


def test_the_binding_pass_collects_the_nodes_the_checkers_judge() -> None:
    r = resolver("import os\nos.environ['A'] = '1'\ndef f():\n    os.putenv('B', '2')\n")
    kinds = [(type(n).__name__, import_time) for n, _, import_time in r.candidates]
    assert ("Subscript", True) in kinds and ("Call", False) in kinds
    assert r.facts.escapes == []  # the resolver reports nothing itself


def test_a_resolved_node_that_is_dropped_never_answers_for_a_new_one() -> None:
    # returns() makes new nodes (a `yield from` becomes a Starred); the memo is keyed by id(node), so it
    # holds every node it answered for: a freed node's id, reused by the next new node, must not bring
    # back the first node's answer (an engine module answered for an own list)
    r = resolver("import vllm.config as cfg\nown = [1]\n")
    scope = r.module_scope
    for _ in range(50):
        engine = ast.Name(id="cfg", ctx=ast.Load())
        got = r.resolve(engine, scope)
        assert got is not None and got.qualname == "vllm.config"
        del engine, got
        local = ast.Name(id="own", ctx=ast.Load())
        again = r.resolve(local, scope)
        assert again is None or again.qualname != "vllm.config", "a freed node's answer came back"
        del local, again
