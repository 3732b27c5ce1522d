"""The effect trace: import the PR's changed model modules in a sandboxed child and record what they do.

Parent side: `plan` (what to copy and import), `sandbox` (run the child: empty environment, temp HOME,
no network, rlimits, timeout), `facts` (the pydantic facts the FT13x rules read). Child side (copied into
the sandbox, never imported by the parent): `child` (audit hooks, line tracer, the import loop),
`snapshot` (before/after state of the interpreter), `standins` (recording stand-ins for the engine).

This file stays import-free: the child loads it as the package `_fasttrack_trace`.
"""
