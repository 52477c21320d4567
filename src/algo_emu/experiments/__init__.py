"""Experiment command-line steps, one module per experiment of the paper."""
