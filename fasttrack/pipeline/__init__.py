"""The verify pipeline: options -> inputs -> Context (range or contribution mode, plus the blast radius and
the effect trace) -> judge -> Verdict. `fasttrack.commands.verify` is its command line.

Two modes:

- **range** (`--base` given): the change set of `base..head` in a git checkout (`--repo`, default the
  current one), the head tree materialised, the model given or inferred from the changed paths, the
  manifest found in the head inside the model's roots, the blast radius from the head's import graph and the
  evidence next to the manifest.
- **contribution** (no range): a contribution directory (default `kernels/kimi_k3`) whose every file is a
  change landing at `<manifest.contribution.target_path>/<file>` in the engine. When the engine tree is at
  hand (`--engine-tree`, `$FASTTRACK_ENGINE_TREE`, or `<cache>/<engine>-<version>`) the contribution is laid
  over it: files that already exist there count as modified, and the blast radius is computed on the overlay.

The policy never comes from the PR head. Range mode: `--policy`, else `policies/vllm.toml` in the current
checkout, else the copy shipped beside the fasttrack package. Contribution mode: `--policy` (the operator's
explicit choice), else the policy and allowed signers of the trusted revision (`--trusted-ref REV`, default
the merge base of HEAD with the default branch; the installed fasttrack's copies outside a git checkout),
never the working tree being judged; a judged copy that differs is FT401 (`fasttrack.trusted`).
"""
