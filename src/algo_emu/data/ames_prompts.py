"""E4's prompts: the tokens an Ames emulator reads, built from one seed's prepared arrays and algorithm fits.

One token per prompt (n = 1): ``[x; w]`` in ``reference_code`` mode (the published code) and ``[x; 1; w; b]``
in ``corrected`` mode. Training prompts (:func:`training_examples`): corrected pairs every training row with
vectors of the fit step's weight pool; reference_code gives every training row the weights of one algorithm
drawn per row. Evaluation prompts (:func:`eval_sets`): each algorithm's own fit on the test rows and, in
corrected mode, weight vectors held out from training. Pure numpy: no model, no torch training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from algo_emu import ablation as abl
from algo_emu.data import ames as data
from algo_emu.data import ames_fits as fits
from algo_emu.data.ames_fits import ALGORITHMS, POOL_FAMILIES
from algo_emu.io import sha256_file
from algo_emu.rng import numpy_stream


def load_seeds(seeds: Sequence[int], prepared_paths: Sequence[str | Path], fits_paths: Sequence[str | Path]
               ) -> dict[int, tuple[dict, dict, dict]]:
    """``{seed: (prepared arrays, fits, {"prepared_sha256", "fits_sha256"})}``, the files given in ``seeds``' order
    (a missing file names the step that writes it)."""
    if not (len(seeds) == len(prepared_paths) == len(fits_paths)):
        raise ValueError(f"{len(seeds)} seeds, {len(prepared_paths)} prepared files, {len(fits_paths)} fit files")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"duplicate seeds: {list(seeds)}")
    out = {}
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        for path, step in ((pp, "prepare"), (fp, "fit")):
            if not Path(path).is_file():
                raise FileNotFoundError(f"{path}: no such file (run `ames {step}` first)")
        out[s] = (data.load_prepared(pp), fits.load_fits(fp), {"prepared_sha256": sha256_file(pp),
                                                                "fits_sha256": sha256_file(fp)})
    return out

#: Prompt sets of the evaluation: the three algorithms' own fits (both modes) and, in corrected
#: mode, weight vectors held out from training (one set per pool family).
HELDOUT_SETS: tuple[str, ...] = tuple(f"heldout_{f}" for f in POOL_FAMILIES)


def prompt_sets(mode: str) -> tuple[str, ...]:
    return ALGORITHMS + (HELDOUT_SETS if mode == "corrected" else ())


def token_width(n_features: int, mode: str) -> int:
    """``reference_code``: [x; w] = 2F; ``corrected``: [x; 1; w; b] = 2F + 2."""
    return 2 * n_features + (2 if mode == "corrected" else 0)


def prompt_tokens(X: np.ndarray, coef: np.ndarray, intercept: float, mode: str) -> np.ndarray:
    """One token per row: ``[x; w]`` (reference_code) or ``[x; 1; w; b]`` (corrected)."""
    rows = X.shape[0]
    W = np.broadcast_to(coef, (rows, coef.size))
    if mode == "corrected":
        one, b = np.ones((rows, 1)), np.full((rows, 1), float(intercept))
        return np.concatenate([X, one, W, b], axis=1)
    return np.concatenate([X, W], axis=1)


def prompt_layout(n_features: int, mode: str, name: str = "ames") -> abl.PromptLayout:
    """Where the weights sit in a token (for the shared ablation mechanism): ``w`` (and ``b`` in corrected)."""
    F = n_features
    if mode == "corrected":
        return abl.PromptLayout(f"{name} corrected [x; 1; w; b]", 2 * F + 2, ((F + 1, 2 * F + 1), (2 * F + 1, 2 * F + 2)))
    return abl.PromptLayout(f"{name} reference_code [x; w]", 2 * F, ((F, 2 * F),))


def pool_prompts(X: np.ndarray, coef: np.ndarray, intercept: np.ndarray, pairs: np.ndarray, mode: str = "corrected"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows paired with pool vectors: ``pairs`` (rows, k) -> tokens (rows * k, d_in), targets, vector index.

    Prompt ``i * k + j`` is row i with vector ``pairs[i, j]``; its target is ``x_i . w + b``."""
    rows, k = pairs.shape
    r = np.repeat(np.arange(rows), k)
    v = pairs.reshape(-1)
    Xr, W, b = X[r], coef[v], intercept[v]
    tokens = np.concatenate([Xr, np.ones((len(r), 1)), W, b[:, None]], axis=1) if mode == "corrected" \
        else np.concatenate([Xr, W], axis=1)
    return tokens, np.einsum("nf,nf->n", Xr, W) + b, v


def algorithm_draw(seed: int, n_train: int) -> np.ndarray:
    """The algorithm of each training example (index into ALGORITHMS), from ``(seed, "ames", "algorithm")``."""
    return numpy_stream(seed, "ames", "algorithm").integers(0, len(ALGORITHMS), size=n_train)


def training_examples(seed: int, prepared: Mapping[str, np.ndarray], fitted: Mapping[str, np.ndarray], mode: str
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens (n_train, d_in), targets (n_train,), label (n_train,)) of one seed.

    corrected: every training row with ``pool_pairs_per_row`` vectors of the training pool (label =
    the vector's family); reference_code (the published code, unchanged): every training row once,
    with the weights of one algorithm drawn per row (label = algorithm index)."""
    X = np.asarray(prepared["X_train"], np.float64)
    if mode == "corrected":
        if "pool_train_coef" not in fitted:
            raise ValueError("corrected fits without a weight pool (written by an older version): rerun `ames fit`")
        tokens, targets, v = pool_prompts(X, fitted["pool_train_coef"], fitted["pool_train_intercept"],
                                          fitted["pool_train_pairs"], mode)
        return tokens, targets, fitted["pool_train_family"][v]
    draw = algorithm_draw(seed, X.shape[0])
    tokens = np.empty((X.shape[0], token_width(X.shape[1], mode)))
    targets = np.empty(X.shape[0])
    for k, a in enumerate(ALGORITHMS):
        rows = draw == k
        tokens[rows] = prompt_tokens(X[rows], fitted[f"coef_{a}"], float(fitted[f"intercept_{a}"]), mode)
        targets[rows] = fitted[f"target_train_{a}"][rows]
    return tokens, targets, draw


def eval_sets(prepared: Mapping[str, np.ndarray], fitted: Mapping[str, np.ndarray], mode: str) -> dict[str, dict]:
    """The evaluation prompts of one seed, on its test rows: ``{set: {"tokens" (N, d_in), "encoded" (N,)
    (the prediction the prompt's weights encode), "target" (N,) (the mode's training target: encoded in
    corrected, the log price in reference_code), "row", "vector", "spread_mse", "donor" (N, n_weights)
    or None}}``.

    Algorithm sets: every test row with that algorithm's weights; ``donor`` = the next algorithm's weights
    (linear -> ridge -> lasso -> linear), for the ``other_algorithm`` ablation; ``spread_mse`` = mean over
    the other two algorithms of the MSE between their test predictions and this one's. Held-out sets
    (corrected): test rows paired with held-out pool vectors of one family (``pool_heldout_pairs``);
    ``spread_mse`` = mean squared deviation of the family's test predictions from their per-row mean
    (what a model that ignores w but knows the family loses at best).
    """
    X, y = np.asarray(prepared["X_test"], np.float64), np.asarray(prepared["y_test"], np.float64)
    rows = np.arange(len(X))
    sets: dict[str, dict] = {}
    for i, algo in enumerate(ALGORITHMS):
        coef, b = fitted[f"coef_{algo}"], float(fitted[f"intercept_{algo}"])
        nxt = ALGORITHMS[(i + 1) % len(ALGORITHMS)]
        donor_w = np.concatenate([fitted[f"coef_{nxt}"], [float(fitted[f"intercept_{nxt}"])]]) if mode == "corrected" \
            else fitted[f"coef_{nxt}"]
        enc = fitted[f"pred_test_{algo}"]
        sets[algo] = {"tokens": prompt_tokens(X, coef, b, mode), "encoded": enc,
                      "target": enc if mode == "corrected" else y, "log_price": y, "row": rows,
                      "vector": np.full(len(X), -1), "donor": np.broadcast_to(donor_w, (len(X), donor_w.size)).copy(),
                      "spread_mse": float(np.mean([np.mean((enc - fitted[f"pred_test_{o}"]) ** 2)
                                                   for o in ALGORITHMS if o != algo]))}
    if mode == "corrected":
        coef, icpt, fam = fitted["pool_heldout_coef"], fitted["pool_heldout_intercept"], fitted["pool_heldout_family"]
        tokens, enc, v = pool_prompts(X, coef, icpt, fitted["pool_heldout_pairs"], mode)
        r = np.repeat(rows, fitted["pool_heldout_pairs"].shape[1])
        for f, name in enumerate(POOL_FAMILIES):
            keep = fam[v] == f
            preds = X @ coef[fam == f].T + icpt[fam == f]
            sets[f"heldout_{name}"] = {
                "tokens": tokens[keep], "encoded": enc[keep], "target": enc[keep], "log_price": y[r[keep]],
                "row": r[keep], "vector": v[keep], "donor": None,
                "spread_mse": float(np.mean((preds - preds.mean(axis=1, keepdims=True)) ** 2))}
    return sets
