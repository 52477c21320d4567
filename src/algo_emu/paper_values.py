"""The paper's reported numbers: the one place they live.

Every table and figure that has a paper counterpart shows these beside ours.
Source: J. Y.-C. Hu, H. Liu, J. Y. Zhang, H. Liu, "In-Context Algorithm Emulation in Fixed-Weight
Transformers", arXiv 2508.17550v2 (26 Sep 2025; ICLR 2026). Each entry's ``source`` names the table,
figure or appendix of that version it is transcribed from; check a value there, not here.
"""

from __future__ import annotations

# E1: heads sweep, test MSE of the composed head (mean, std over seeds), p = 60.
HEADS_TABLE = {
    "source": "arXiv 2508.17550v2, numerical experiments: the table of test MSE against the number of heads "
              "(ablation of Theorem 4.1), mean and std over 10 seeds",
    "heads": [1, 2, 4, 6, 8, 12],
    "mse": [3.469, 2.802, 1.222, 1.012, 0.793, 0.686],
    "std": [0.381, 0.413, 0.603, 0.204, 0.127, 0.171],
    "n_seeds": 10,
}

# E3: statistical algorithms, mean / std loss against the number of heads (Appendix C.1 figure).
STATISTICAL_HEADS = {
    "source": "arXiv 2508.17550v2, Appendix C.1 (emulating statistical algorithms): the figure of test loss "
              "against the number of heads for Lasso, Ridge and Linear, mean and std",
    "heads": [1, 2, 4, 6, 8, 12],
    "lasso": {"mean": [0.1286, 0.0863, 0.0853, 0.0948, 0.0756, 0.0857],
              "std": [0.0368, 0.0336, 0.0249, 0.0280, 0.0216, 0.0194]},
    "ridge": {"mean": [0.1127, 0.1619, 0.1477, 0.1326, 0.1440, 0.1517],
              "std": [0.0153, 0.0670, 0.0832, 0.0576, 0.0853, 0.0380]},
    "linear": {"mean": [0.1472, 0.1317, 0.1689, 0.1353, 0.1585, 0.1576],
               "std": [0.0210, 0.0533, 0.0929, 0.0629, 0.0788, 0.0491]},
}


def paper_heads(H: int) -> tuple[float, float]:
    """(mse, std) the paper reports for H heads, or (nan, nan) when it reports none."""
    if H in HEADS_TABLE["heads"]:
        i = HEADS_TABLE["heads"].index(H)
        return HEADS_TABLE["mse"][i], HEADS_TABLE["std"][i]
    return float("nan"), float("nan")
