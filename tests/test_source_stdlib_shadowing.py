"""FT136 and modules named like the standard library (or `site`'s hooks) in the model's roots.

The decision: such a module is an error where its directory can land on sys.path, and spared inside a
package. Where a directory lands on sys.path: a script run from it, `python -m`/`-c` with it as the
working directory, and pytest's `prepend` import mode, which inserts the first directory upwards of a test
or conftest file that has no `__init__.py`. Inside a package the module is imported only by its dotted
name (`...kda.chunk`, never `chunk`): pytest inserts the package's parent, not the package, and every
process the harness starts keeps the working directory and a script's directory off sys.path
(PYTHONSAFEPATH=1 in `collect`, `python -I` in the trace sandbox), so a package's `json.py` is never
`json` there. A user running a script from inside the package by path is outside what the harness runs.
`sitecustomize`/`usercustomize` are errors everywhere (`site` imports them by name at start-up).

The package test is the head's `__init__.py` being a regular file: a directory or a symlink named
`__init__.py` does not make the module package-internal to the rule (fail closed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.evidence.collect import _subprocess_env
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Severity
from fasttrack.rules import all_rules

MakeRepo = Callable[..., GitRepo]
POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
K3 = "vllm/models/kimi_k3"


def ft136(make_repo: MakeRepo, files: dict[str, str]) -> list[str | None]:
    from test_zones_registry import ENGINE

    repo = make_repo(ENGINE)
    repo.commit(files)
    ctx = build_context(VerifyOptions(repo=repo.path, base="HEAD~1", head="HEAD", policy=POLICY))
    return sorted(f.path for r in all_rules() if r.code == "FT136" for f in r.run(gather_facts(ctx))
                  if f.severity is Severity.ERROR)


@pytest.mark.usefixtures("isolated_cache")
@pytest.mark.parametrize("files", [
    # a test directory without __init__.py: pytest's prepend mode puts it on sys.path[0]
    {f"{K3}/nvidia/tests/json.py": "dumps = None\n", f"{K3}/nvidia/tests/test_k3.py": "X = 1\n"},
    # `__init__.py` is a directory (a file inside it), not a module: the directory is no package
    {f"{K3}/nvidia/os.py": "X = 1\n", f"{K3}/nvidia/__init__.py/x.txt": "x\n"},
    # site hooks, even inside a package
    {f"{K3}/nvidia/__init__.py": "", f"{K3}/nvidia/sitecustomize.py": "X = 1\n"},
], ids=["test-dir-without-init", "init-is-a-directory", "site-hook-in-a-package"])
def test_stdlib_named_module_where_its_directory_lands_on_sys_path(make_repo: MakeRepo,
                                                                   files: dict[str, str]) -> None:
    shadow = next(p for p in files if p.rsplit("/", 1)[-1] in ("json.py", "os.py", "sitecustomize.py"))
    assert shadow in ft136(make_repo, files)


@pytest.mark.usefixtures("isolated_cache")
def test_stdlib_named_modules_inside_packages_are_spared(make_repo: MakeRepo) -> None:
    files = {f"{K3}/nvidia/__init__.py": "", f"{K3}/nvidia/types.py": "X = 1\n",
             f"{K3}/nvidia/json.py": "X = 1\n", f"{K3}/nvidia/tests/__init__.py": "",
             f"{K3}/nvidia/tests/typing.py": "X = 1\n", f"{K3}/nvidia/tests/test_k3.py": "X = 1\n"}
    assert ft136(make_repo, files) == []


def test_harness_processes_keep_the_working_directory_off_sys_path(tmp_path: Path) -> None:
    # the premise of sparing package-internal modules: the contribution's processes run with
    # PYTHONSAFEPATH, so neither the working directory nor a script's directory is sys.path[0]
    contribution = tmp_path / "kimi_k3"
    contribution.mkdir()
    assert _subprocess_env(contribution)["PYTHONSAFEPATH"] == "1"
