"""E6: the companion essay's claims (in-context learning as implicit Bayes and implicit GD) as measured verdicts.

Modules: :mod:`.equivalences` (hand-built float64 attention, no training),
:mod:`.tasks` (prompts and priors), :mod:`.model` (the small causal transformer),
:mod:`.baselines` (OLS, ridge, GD, nearest neighbour, prior mean, discrete-prior Bayes),
:mod:`.train` (training and the checks that refuse out-of-distribution use),
:mod:`.evaluate` (per-seed measurements) and :mod:`.claims` (the verdict table).
docs/essay.md explains every choice.
"""
