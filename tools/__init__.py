"""Our own machinery around the pipeline, not part of the installed package ``algo_emu``.

- ``tools.campaign``: the paper-scale campaign (one pinned commit, one setting per job, resumable across
  interruptions and machines) and the committed set's page; ``python -m tools.campaign --help``.
- ``tools.resume_parts``: files cut into parts and a resume state packed to fit a bounded return (the GPU script).
- ``tools.docs_numbers``: the README's one generated block, filled from the committed sets and benchmarks.
- ``tools/benchmarks/``: per-machine benchmark files (other CPUs, repeats, A/B between commits, GPU runs).

Run from the repository root (``python -m tools.<module>``). Nothing under ``src/`` imports this package
(``tests/test_imports.py``); its tests are ``tools/tests/`` (part of ``make test``).
"""
