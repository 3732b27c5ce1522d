"""Engine-side baselines: what each engine itself runs for a model's layer, and its fp32 oracle.

This package belongs to the judge (policies/<engine>.toml names its entry points; a fast-track PR that edits
it is FT401). A contribution's speedups and errors are measured against it, never against code the
contribution supplies. The contract: docs/baseline-contract.md.
"""
