"""Engine accessors on the real vLLM 0.33.0 tree: what the model packages write into state reached from
`get_current_vllm_config()` / `get_forward_context()` / the process groups (FT120), and the layers'
self-registration in the static forward context that the policy allows (`engine_self_registrations`).

Measured on vLLM 0.33.0 (every `vllm/models/<model>/**.py` but `common`, each with its own package as the
contribution's): 15 writes, all real writes to engine state; 13 set `forward_context.is_padding` (the
sequence-parallel padding mask), one forces `attention_config.sparse_mla_force_mqa`, one raises
`compilation_config.cudagraph_num_of_warmups`. Without the self-registration rule the same scan also reports
the attention layers' `static_forward_context[prefix] = self` reached through an accessor (in kimi_k3:
nvidia/mla.py; its two KDA layers reach the config through their `vllm_config` parameter, which the scan does
not taint)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_repo_support import POLICY

from fasttrack.confinement.escapes import find_escapes
from fasttrack.policy import load_policy

pytestmark = pytest.mark.vllm_tree

SPEC = load_policy(POLICY).escapes


def accessor_writes(tree: Path, spec: object = SPEC) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for model_dir in sorted((tree / "vllm" / "models").iterdir()):
        if not model_dir.is_dir() or model_dir.name == "common":
            continue
        own = {f"vllm.models.{model_dir.name}"}
        for f in sorted(model_dir.rglob("*.py")):
            rel = f.relative_to(tree).as_posix()
            for e in find_escapes(f.read_text(), rel, own, own_op_namespaces={model_dir.name},
                                  settings=spec):  # type: ignore[arg-type]
                if e.target and "()." in e.target and e.target.startswith(("vllm.config", "vllm.forward",
                                                                           "vllm.distributed")):
                    out.append((rel, e.line, e.target.split("().", 1)[1]))
    return out


def test_accessor_writes_on_the_real_tree(vllm_tree: Path) -> None:
    got = accessor_writes(vllm_tree)
    assert len(got) == 15
    assert [w for w in got if w[0].startswith("vllm/models/kimi_k3/")] == [
        ("vllm/models/kimi_k3/nvidia/model.py", 1136, "is_padding"),
        ("vllm/models/kimi_k3/nvidia/mtp.py", 130, "is_padding"),
    ]
    assert sum(1 for w in got if w[2] == "is_padding") == 13
    assert ("vllm/models/hy_v4/nvidia/attention.py", 660, "attention_config.sparse_mla_force_mqa") in got


def test_layer_self_registration_is_allowed_only_by_the_policy_rule(vllm_tree: Path) -> None:
    strict = SPEC.model_copy(update={"engine_self_registrations": []})
    extra = sorted(set(accessor_writes(vllm_tree, strict)) - set(accessor_writes(vllm_tree)))
    k3 = [(p, line) for p, line, what in extra if p.startswith("vllm/models/kimi_k3/")
          and what == "compilation_config.static_forward_context[...]"]
    assert k3 == [("vllm/models/kimi_k3/nvidia/mla.py", 408)]
    assert all(what.endswith("static_forward_context[...]") for _, _, what in extra)
