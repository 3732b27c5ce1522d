"""The import graph: grimp build, the content-keyed cache, lazy imports, imports of unseen modules."""

from __future__ import annotations

import marshal
import os
import shutil
import time
from pathlib import Path

import pytest
from blast_fake_tree import write_tree

from fasttrack.confinement import graph as graph_mod
from fasttrack.confinement.graph import (
    GraphBuildError,
    GraphLoad,
    SourceScopes,
    build_module_graph,
    load_module_graph,
    module_name,
    tree_key,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "head")


def test_module_names() -> None:
    assert module_name("vllm/a/b.py") == "vllm.a.b"
    assert module_name("vllm/a/__init__.py") == "vllm.a"
    assert module_name("vllm/a/not-a-module.py") is None
    assert module_name("vllm/a/data.json") is None


def test_build_records_edges_with_lines(tree: Path) -> None:
    g = build_module_graph(tree, "vllm", exclude_type_checking=True)
    sites = g.importers("vllm.models.alpha.kernels")
    assert set(sites) == {"vllm.model_executor.models.gamma", "vllm.models.alpha.model"}
    assert [s.line for s in sites["vllm.model_executor.models.gamma"]] == [1]
    assert "vllm.model_executor.layers.typed" not in g.importers("vllm.models.alpha.typing_only")
    # Files grimp does not see (a directory without __init__.py) are still mapped to paths.
    assert "vllm.models.alpha.nsdir.hidden" not in g.modules
    assert g.path_of("vllm.models.alpha.nsdir.hidden") == "vllm/models/alpha/nsdir/hidden.py"


def test_cache_hit_is_by_content_not_location_or_mtime(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "graphs"
    cold = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert not cold.from_cache and cold.cache_file is not None and cold.cache_file.is_file()
    warm = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert warm.from_cache and warm.key == cold.key
    assert warm.graph.importers_of == cold.graph.importers_of
    assert warm.graph.modules == cold.graph.modules and warm.graph.files == cold.graph.files

    copy = tmp_path / "elsewhere"
    shutil.copytree(tree, copy)
    future = time.time() + 3600
    for p in copy.rglob("*.py"):
        os.utime(p, (future, future))
    moved = load_module_graph(copy, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert moved.from_cache and moved.key == cold.key

    (copy / "vllm/models/alpha/private.py").write_text("from .kernels import fused\n")
    edited = load_module_graph(copy, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert not edited.from_cache and edited.key != cold.key
    assert "vllm.models.alpha.private" in edited.graph.importers("vllm.models.alpha.kernels")


def test_options_are_part_of_the_key(tree: Path) -> None:
    a, _, count = tree_key(tree, "vllm", exclude_type_checking=True)
    b, _, _ = tree_key(tree, "vllm", exclude_type_checking=False)
    assert a != b and count == len(list(tree.rglob("*.py")))


def test_corrupt_cache_is_rebuilt(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "graphs"
    cold = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert cold.cache_file is not None
    cold.cache_file.write_text('{"format": 1, "key": "truncated')
    again = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert not again.from_cache and again.graph.importers_of == cold.graph.importers_of
    assert load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache).from_cache


def test_a_cache_file_of_the_wrong_shape_is_rebuilt(tree: Path, tmp_path: Path) -> None:
    """The cache is marshal data; a well-formed marshal file with the right key but wrong types is a miss."""
    cache = tmp_path / "graphs"
    cold = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
    assert cold.cache_file is not None and cold.cache_file.suffix == ".graph"
    fmt, key, package, modules, files, imports, names = marshal.loads(cold.cache_file.read_bytes())
    bad_rows = (("vllm.a", "vllm.b", (("1", "import b"),)),)  # a line number that is not an int
    for bad in ((fmt, key, package, (1, 2), files, imports, names),
                (fmt, key, package, modules, files, bad_rows, names),
                (fmt, key, package, modules, files, imports, bad_rows),
                (fmt, key, package, modules, files, (("vllm.a",),), names),
                (fmt, key, package, modules, files, imports),
                (fmt + 1, key, package, modules, files, imports, names)):
        cold.cache_file.write_bytes(marshal.dumps(bad))
        again = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache)
        assert not again.from_cache and again.graph.importers_of == cold.graph.importers_of
    assert load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache).from_cache


def test_no_cache_dir_writes_nothing(tree: Path, tmp_path: Path) -> None:
    load = load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=None)
    assert not load.from_cache and load.cache_file is None
    assert not (tmp_path / "graphs").exists()


def test_build_errors_say_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphBuildError, match=r"vllm/__init__\.py is missing"):
        build_module_graph(tmp_path / "empty", "vllm", exclude_type_checking=True)
    bad = write_tree(tmp_path / "bad", {"vllm/models/alpha/private.py": "def f(:\n"})
    with pytest.raises(GraphBuildError, match="grimp could not build"):
        build_module_graph(bad, "vllm", exclude_type_checking=True)


# Imports the direct scan must read as grimp's public graph does: several statements for one edge, relative
# and `as` imports, a function-level one, TYPE_CHECKING, a module only imported (a namespace directory's).
_SCAN_EXTRAS = {
    "vllm/models/alpha/many.py": (
        "from typing import TYPE_CHECKING\n"
        "from . import kernels\n"
        "import vllm.models.alpha.kernels as k\n"
        "from .kernels import fused  # again\n"
        "if TYPE_CHECKING:\n"
        "    from vllm.model_executor.layers import typed\n"
        "def f():\n"
        "    from ..alpha import model\n"
        "    import vllm.models.alpha.nsdir.hidden\n"
    ),
}


def _public_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_mod, "_scan_direct", lambda *a: None)


@pytest.mark.parametrize("tc", [True, False])
def test_the_direct_scan_gives_grimps_public_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tc: bool) -> None:
    tree = write_tree(tmp_path / "head", _SCAN_EXTRAS)
    direct = build_module_graph(tree, "vllm", exclude_type_checking=tc)
    with monkeypatch.context() as m:
        _public_only(m)
        public = build_module_graph(tree, "vllm", exclude_type_checking=tc)
    assert direct.importers_of == public.importers_of and direct.modules == public.modules
    sites = direct.importers("vllm.models.alpha.kernels")["vllm.models.alpha.many"]
    assert [s.line for s in sites] == [2, 3, 4]
    assert ("vllm.models.alpha.many" in direct.importers("vllm.model_executor.layers.typed")) is not tc


def test_another_grimp_version_takes_the_public_api(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grimp

    monkeypatch.setattr(grimp, "__version__", "3.21", raising=False)
    assert graph_mod._scan_direct(grimp, "vllm", True) is None  # private steps unchecked there
    g = build_module_graph(tree, "vllm", exclude_type_checking=True)
    assert set(g.importers("vllm.models.alpha.kernels")) == {"vllm.model_executor.models.gamma",
                                                             "vllm.models.alpha.model"}


@pytest.mark.parametrize("public", [False, True])
def test_a_syntax_error_fails_the_build_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    public: bool) -> None:
    if public:
        _public_only(monkeypatch)
    bad = write_tree(tmp_path / "bad", {"vllm/models/alpha/private.py": "def f(:\n"})
    with pytest.raises(GraphBuildError, match=r"grimp could not build .*private"):
        build_module_graph(bad, "vllm", exclude_type_checking=True)


def test_function_level_imports(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import a\n"                      # 1 module level
        "if True:\n"                      # 2
        "    import b\n"                  # 3 indented, still module level
        "class C:\n"                      # 4
        "    import c\n"                  # 5 class body: runs at import
        "    def f(self):\n"              # 6
        "        import d\n"              # 7 function level
        "def g():\n"                      # 8
        "    try:\n"                      # 9
        "        import e\n"              # 10 function level
        "    except ImportError:\n"
        "        pass\n"
        "h = lambda: __import__('f')\n"   # 13
    )
    s = SourceScopes(tmp_path)
    assert [s.function_level("m.py", n) for n in (1, 3, 5, 7, 10)] == [False, False, False, True, True]
    assert s.function_level("m.py", 99) is False
    assert s.function_level("missing.py", 1) is False


# Lines inside lambdas and functions reached only through decorators, `;`, f-strings, default values, match
# cases and class bodies: only the top-level statement holding a line is walked (speed), so the answers must
# be the whole module's.
_SCOPES_TRICKY = (
    'x = dec(lambda: (1,\n'
    '    2)); import os\n'
    'def f(): pass\n'
    '@dec(lambda:\n'
    '    0)\n'
    'def top():\n'
    '    pass\n'
    'x = f"""{\n'
    '    (lambda: \n'
    '      3)()\n'
    '  }"""; import sys\n'
    'class C:\n'
    '    y = [lambda: i for i in range(3)]\n'
    '    @staticmethod\n'
    '    @other(lambda z:\n'
    '        z)\n'
    '    def g(self):\n'
    '        import json\n'
    'if True:\n'
    '    import a; h = lambda: (\n'
    '        4); import b\n'
    'x = (lambda:\n'
    '   f"{ (lambda: 5)() }"\n'
    '   )\n'
    'try:\n'
    '    pass\n'
    'except Exception:\n'
    '    def q(\n'
    '        a=lambda: 1,\n'
    '    ):\n'
    '        import c\n'
    'match x:\n'
    '    case 1:\n'
    '        y = lambda: (\n'
    '          1)\n'
)


def test_function_level_walks_only_the_statement_holding_the_line(tmp_path: Path) -> None:
    import ast

    (tmp_path / "t.py").write_text("".join(_SCOPES_TRICKY))
    tree = ast.parse("".join(_SCOPES_TRICKY))
    spans = []  # the spans of a walk of the whole module, as before
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            spans.append((node.body[0].lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.Lambda):
            spans.append((node.body.lineno, node.body.end_lineno or node.body.lineno))
    s = SourceScopes(tmp_path)
    lines = "".join(_SCOPES_TRICKY).splitlines()
    indented = [n for n, raw in enumerate(lines, 1) if raw[:1] in (" ", "\t")]
    got = [s.function_level("t.py", n) for n in indented]
    assert got == [any(a <= n <= b for a, b in spans) for n in indented]
    assert got.count(True) == 12 and got.count(False) == 12  # both kinds of line are there


def test_find_imports_of_a_module_grimp_cannot_see(tree: Path) -> None:
    (tree / "vllm/models/alpha/rel_user.py").write_text("def f():\n    from .nsdir import hidden\n")
    g = build_module_graph(tree, "vllm", exclude_type_checking=True)
    found = SourceScopes(tree).find_imports_of("vllm.models.alpha.nsdir.hidden", g.files, "vllm")
    got = {(f.importer, f.line, f.function_level) for f in found}
    assert got == {("vllm.model_executor.layers.ns_user", 1, False), ("vllm.models.alpha.rel_user", 2, True)}


def test_a_vouched_tree_id_keys_the_cache_without_reading_files(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "graphs"

    def load(tree_id: str | None) -> GraphLoad:
        return load_module_graph(tree, "vllm", exclude_type_checking=True, cache_dir=cache, tree_id=tree_id)

    cold = load("git-tree:a1")
    assert not cold.from_cache and cold.files_hashed == len(cold.graph.files)
    warm = load("git-tree:a1")
    assert warm.from_cache and warm.files_hashed == 0 and warm.graph.files == cold.graph.files
    other = load("git-tree:b2")
    assert not other.from_cache and other.key != cold.key
    by_content = load(None)
    assert not by_content.from_cache and by_content.key != cold.key  # the two kinds of key never mix


def test_one_cache_root_for_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Materialised trees, graphs, overlays and engine trees share one helper, so $FASTTRACK_CACHE_DIR (or
    $XDG_CACHE_HOME) moves all of them."""
    from fasttrack import cache
    from fasttrack.changes import git
    from fasttrack.confinement import graph

    assert git.cache_root is cache.cache_root and graph.cache_root is cache.cache_root
    monkeypatch.delenv("FASTTRACK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "fasttrack"
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", "~/ft-cache")
    assert cache.cache_root() == Path.home() / "ft-cache"
    assert graph.default_graph_cache_dir() == Path.home() / "ft-cache" / "graphs"


def test_string_references_need_the_prefix_right_after_a_quote(tmp_path: Path) -> None:
    # Only files holding a quoted `pkg.` are searched: the prefix right after either quote, wherever it is
    # (after unquoted imports of the package too); never unquoted, never at the start of the file.
    assert graph_mod._quoted_at(b"import pkg.a\nx = 'pkg.b'\n", b"pkg.")
    assert graph_mod._quoted_at(b'import pkg.a\nx = "pkg.b:C"\n', b"pkg.")
    assert not graph_mod._quoted_at(b"pkg.a = 1\nimport pkg.b\n# pkg.c\n", b"pkg.")
    assert not graph_mod._quoted_at(b"'xpkg.a' 'pkg'", b"pkg.")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("")
    (pkg / "b.py").write_text("import pkg.a\nNAME = 'pkg.a'\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    files = {"pkg.a": "pkg/a.py", "pkg.b": "pkg/b.py", "pkg.c": "pkg/c.py"}
    found = graph_mod.find_string_references(tmp_path, files, "pkg", frozenset({"pkg", *files}))
    assert {k: list(v) for k, v in found.items()} == {"pkg.a": ["pkg.b"]}
    assert found["pkg.a"]["pkg.b"][0].line == 2
