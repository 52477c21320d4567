"""E4 Ames Housing: the three prompt algorithms (LinearRegression, Ridge, Lasso) and their fits.

The emulator's prompt carries an algorithm's weights; this module fits them, per
seed, on that seed's prepared arrays (``algo_emu.data.ames.prepare``), in one of
two modes:

``corrected`` (default)
    Fit on the training rows only, intercept kept. LinearRegression as is; Ridge
    and Lasso with alpha chosen by K-fold cross-validation on the training rows
    (folds from the named stream ``(seed, "ames", "cv")``): Ridge as scikit-learn's
    ``RidgeCV(alphas, cv=KFold)`` (mean R^2 over folds), Lasso as ``LassoCV``
    (mean squared error over folds). The prompt is ``[x; 1; w; b]`` and the
    training target is the prompt's own prediction ``w.x + b``. The three fits
    alone are not enough to make an emulator read ``w``: their predictions
    nearly coincide (pairwise test MSE 0.002-0.02 against a target variance of
    about 0.13), so a model that ignores ``w`` scores almost as well.
    Corrected mode therefore also draws a **weight pool** (:func:`weight_pool`):
    many weight vectors per seed, which training and evaluation pair with rows.

    * ``refit``: Ridge refits on bootstrap resamples of the training rows, over
      a log grid of alphas (``pool_log10_alpha_min..max``, ``pool_n_alphas``);
    * ``perturbed``: each refit's ``w`` scaled by ``c ~ U(pool_coef_scale_min,
      pool_coef_scale_max)`` (negative c flips its sign) plus a random direction
      ``d`` (all F coordinates, or the top ``pool_perturb_rank`` principal
      directions of the training rows), sized so ``std(X_train d)`` is
      ``pool_perturb_scale`` times ``std(y_train)``; its intercept gets a normal
      draw of the same standard deviation. These are weights no algorithm
      produces; their targets differ from each other by about the target's
      own variance, so ignoring ``w`` costs that much.

    The training pool comes from ``pool_bootstraps`` resamples, the held-out
    pool from ``pool_heldout_bootstraps`` other resamples (their own streams), so
    no held-out vector, and none of the three algorithms' fits, is seen in
    training. Training prompts pair every training row with
    ``pool_pairs_per_row`` training-pool vectors; evaluation prompts pair every
    test row with ``pool_eval_pairs_per_row`` held-out vectors (streams
    ``(seed, "ames", "pool", ...)``).

``reference_code`` (the published code)
    Fit on ALL rows (the seed's training and test rows), keep ``coef_`` only
    (the intercept is dropped), ``alpha = reference_alpha`` (1.0) for Ridge and
    Lasso. The prompt is ``[x; w]`` and the training target is the true log
    price whatever the algorithm. With standardised inputs and a log-price
    target, Lasso(alpha=1) zeroes every coefficient; :func:`fit_seed` records
    whether it did (``all_coef_zero``), it is not assumed.

Ridge's cross-validation is computed with one SVD per fold (all alphas at once)
instead of ``len(alphas) x folds`` scikit-learn fits; it selects the same alpha
as ``RidgeCV(alphas, cv=KFold(...))`` (a test checks this), and the final
weights come from scikit-learn's ``Ridge(alpha).fit`` on all training rows, as
``RidgeCV`` refits them.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from algo_emu.specs import reads as _reads
from algo_emu.io import atomic_path, read_json, write_json
from algo_emu.rng import derive, numpy_stream

log = logging.getLogger(__name__)

ALGORITHMS: tuple[str, ...] = ("linear", "ridge", "lasso")
SKLEARN_NAMES = {"linear": "LinearRegression", "ridge": "Ridge", "lasso": "Lasso"}
MODES: tuple[str, ...] = ("corrected", "reference_code")

#: The keys reference_code fits read (the published code's fits; the pool keys do not touch them), declared
#: once in algo_emu.specs (the rules pass exactly these).
REFERENCE_FIT_KEYS: tuple[str, ...] = _reads("ames", "fit").keys
#: Weight-pool keys (corrected mode only; see the module docstring and ames.schema.yaml).
POOL_KEYS: tuple[str, ...] = _reads("ames", "fit").extra["corrected"]
FIT_KEYS: tuple[str, ...] = REFERENCE_FIT_KEYS + POOL_KEYS
#: Families of pool vectors (index = the ``pool_*_family`` code).
POOL_FAMILIES: tuple[str, ...] = ("refit", "perturbed")


class AmesFitError(ValueError):
    """Bad input to the fit step (unknown mode, missing or malformed prepared arrays)."""


def ridge_alphas(p: Mapping[str, Any]) -> np.ndarray:
    return np.logspace(float(p["ridge_log10_alpha_min"]), float(p["ridge_log10_alpha_max"]), int(p["ridge_n_alphas"]))


def cv_splitter(seed: int, n_splits: int):
    """K folds of the training rows, shuffled by the named stream ``(seed, "ames", "cv")``."""
    from sklearn.model_selection import KFold

    return KFold(n_splits=int(n_splits), shuffle=True, random_state=derive(seed, "ames", "cv") % (2**32))


def ridge_cv_scores(X: np.ndarray, y: np.ndarray, alphas: np.ndarray, cv) -> np.ndarray:
    """Mean validation R^2 over the folds of ``cv`` for every alpha (Ridge with intercept).

    Per fold: centre the fold's training rows, one thin SVD ``Xc = U S V^T``, then
    ``w(alpha) = V diag(s / (s^2 + alpha)) U^T yc`` and ``b = mean(y) - mean(x).w``
    for all alphas at once; R^2 on the fold's validation rows (scikit-learn's
    ``Ridge.score``, which ``RidgeCV(cv=...)`` averages over folds).
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    scores = []
    for tr, va in cv.split(X):
        xm, ym = X[tr].mean(axis=0), y[tr].mean()
        U, s, Vt = np.linalg.svd(X[tr] - xm, full_matrices=False)
        uy = U.T @ (y[tr] - ym)                                        # (r,)
        W = Vt.T @ (s / (s**2 + alphas[:, None]) * uy).T                 # (F, n_alphas)
        pred = (X[va] - xm) @ W + ym                                    # (n_va, n_alphas)
        resid = ((y[va, None] - pred) ** 2).sum(axis=0)
        total = ((y[va] - y[va].mean()) ** 2).sum()
        scores.append(1.0 - resid / total)
    return np.mean(scores, axis=0)


def _fit_one(name: str, X: np.ndarray, y: np.ndarray, mode: str, seed: int, p: Mapping[str, Any]):
    """A fitted scikit-learn estimator and the alpha used (None for LinearRegression)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import Lasso, LassoCV, LinearRegression, Ridge

    if name == "linear":
        return LinearRegression().fit(X, y), None, {}
    if mode == "reference_code":
        est = (Ridge if name == "ridge" else Lasso)(alpha=float(p["reference_alpha"]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            est.fit(X, y)
        return est, float(p["reference_alpha"]), {"convergence_warnings": len(caught)}
    cv = cv_splitter(seed, p["cv_folds"])
    if name == "ridge":
        alphas = ridge_alphas(p)
        scores = ridge_cv_scores(X, y, alphas, cv)
        best = int(np.argmax(scores))  # first best on ties, as GridSearchCV's rank
        extra = {"alpha_grid": [float(alphas[0]), float(alphas[-1]), int(alphas.size)], "cv_mean_r2": float(scores[best]),
                 "alpha_at_grid_edge": best in (0, alphas.size - 1)}
        return Ridge(alpha=float(alphas[best])).fit(X, y), float(alphas[best]), extra
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est = LassoCV(alphas=int(p["lasso_n_alphas"]), eps=float(p["lasso_eps"]), max_iter=int(p["lasso_max_iter"]),
                      cv=cv).fit(X, y)
    k = int(np.argmin(est.mse_path_.mean(axis=1)))
    extra = {"alpha_grid": [float(est.alphas_.min()), float(est.alphas_.max()), int(est.alphas_.size)],
             "cv_mean_mse": float(est.mse_path_.mean(axis=1)[k]), "convergence_warnings": len(caught),
             "alpha_at_grid_edge": k in (0, est.alphas_.size - 1)}
    return est, float(est.alpha_), extra


def ridge_path_bootstrap(X: np.ndarray, y: np.ndarray, counts: np.ndarray, alphas: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Ridge (with intercept) on the resample that holds row i ``counts[i]`` times, for every alpha.

    Returns ``(W (n_alphas, F), b (n_alphas,))``, equal to scikit-learn's ``Ridge(alpha).fit(X[idx], y[idx])``
    (a test checks it): weighted centring, one eigendecomposition of the weighted Gram matrix
    ``Xc^T C Xc`` (F x F), then ``w(alpha) = Q diag(1 / (lam + alpha)) Q^T Xc^T C yc``.
    """
    c = np.asarray(counts, np.float64)
    n = c.sum()
    xm, ym = c @ X / n, float(c @ y / n)
    Xc = X - xm
    G = Xc.T @ (c[:, None] * Xc)
    r = Xc.T @ (c * (y - ym))
    lam, Q = np.linalg.eigh(G)
    lam = np.clip(lam, 0.0, None)
    W = (Q @ ((Q.T @ r)[:, None] / (lam[:, None] + np.asarray(alphas, np.float64)[None, :]))).T
    return W, ym - W @ xm


def weight_pool(X: np.ndarray, y: np.ndarray, seed: int, split: str, n_bootstraps: int,
                p: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``n_bootstraps`` resamples' refits over the alpha grid and one perturbed copy of each.

    ``split`` names the stream: resample k of split s draws from ``numpy_stream(seed, "ames", "pool", s, k)``,
    so the training and held-out pools never share a resample, and adding resamples never shifts
    existing ones. Returns ``coef`` (K, F), ``intercept`` (K,), ``family`` (K,) (index into
    :data:`POOL_FAMILIES`), ``alpha`` (K,), ``bootstrap`` (K,), ``coef_scale`` (K,; 1 for refits).
    """
    n, F = X.shape
    alphas = np.logspace(float(p["pool_log10_alpha_min"]), float(p["pool_log10_alpha_max"]), int(p["pool_n_alphas"]))
    rank = int(p["pool_perturb_rank"])
    if rank < 0:
        raise AmesFitError(f"ames.pool_perturb_rank must be >= 0 (0 = all F directions), got {rank}")
    basis = None
    if 0 < rank < F:
        basis = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)[2][:rank].T        # (F, rank)
    sd_y = float(np.std(y))
    scale = float(p["pool_perturb_scale"]) * sd_y
    lo, hi = float(p["pool_coef_scale_min"]), float(p["pool_coef_scale_max"])
    if hi < lo:
        raise AmesFitError(f"ames.pool_coef_scale_max ({hi}) is below ames.pool_coef_scale_min ({lo})")
    out: dict[str, list] = {k: [] for k in ("coef", "intercept", "family", "alpha", "bootstrap", "coef_scale")}
    for k in range(int(n_bootstraps)):
        rng = numpy_stream(seed, "ames", "pool", split, k)
        counts = np.bincount(rng.integers(0, n, size=n), minlength=n)
        W, b = ridge_path_bootstrap(X, y, counts, alphas)
        for j, a in enumerate(alphas):
            out["coef"].append(W[j]); out["intercept"].append(b[j]); out["family"].append(0)
            out["alpha"].append(a); out["bootstrap"].append(k); out["coef_scale"].append(1.0)
        for j, a in enumerate(alphas):
            z = rng.standard_normal(basis.shape[1] if basis is not None else F)
            d = basis @ z if basis is not None else z
            spread = float(np.std(X @ d))
            d = d * (scale / spread) if spread > 0 else np.zeros(F)
            c = float(rng.uniform(lo, hi))
            out["coef"].append(c * W[j] + d); out["intercept"].append(b[j] + scale * float(rng.standard_normal()))
            out["family"].append(1); out["alpha"].append(a); out["bootstrap"].append(k); out["coef_scale"].append(c)
    return {"coef": np.asarray(out["coef"], np.float64).reshape(-1, F),
            "intercept": np.asarray(out["intercept"], np.float64), "family": np.asarray(out["family"], np.int64),
            "alpha": np.asarray(out["alpha"], np.float64), "bootstrap": np.asarray(out["bootstrap"], np.int64),
            "coef_scale": np.asarray(out["coef_scale"], np.float64)}


def pool_pairs(seed: int, split: str, n_rows: int, pool_size: int, per_row: int) -> np.ndarray:
    """(n_rows, per_row) pool indices: row i is paired with ``per_row`` distinct vectors (when the pool
    has that many), drawn from ``numpy_stream(seed, "ames", "pool", split, "pairs")``."""
    rng = numpy_stream(seed, "ames", "pool", split, "pairs")
    if per_row <= pool_size:
        return np.argsort(rng.random((n_rows, pool_size)), axis=1)[:, :per_row]
    return rng.integers(0, pool_size, size=(n_rows, per_row))


def pool_arrays(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, seed: int, p: Mapping[str, Any]
                ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The training and held-out pools of one seed, their row pairings, and a summary."""
    arrays: dict[str, np.ndarray] = {}
    summary: dict[str, Any] = {}
    for split, k, X, per_row in (("train", p["pool_bootstraps"], Xtr, p["pool_pairs_per_row"]),
                                 ("heldout", p["pool_heldout_bootstraps"], Xte, p["pool_eval_pairs_per_row"])):
        if int(k) < 1:
            raise AmesFitError(f"ames.pool_{'bootstraps' if split == 'train' else 'heldout_bootstraps'} "
                               f"must be >= 1, got {k}")
        pool = weight_pool(Xtr, ytr, seed, split, int(k), p)
        for name, v in pool.items():
            arrays[f"pool_{split}_{name}"] = v
        pairs = pool_pairs(seed, split, len(X), len(pool["coef"]), int(per_row))
        arrays[f"pool_{split}_pairs"] = pairs
        preds = X @ pool["coef"].T + pool["intercept"]                          # (rows, K)
        fam = {}
        for f, name in enumerate(POOL_FAMILIES):
            cols = preds[:, pool["family"] == f]
            fam[name] = {"n_vectors": int(cols.shape[1]),
                         # what ignoring w costs within the family: mean squared deviation from the
                         # family's mean prediction per row (the best weight-blind guess for that row)
                         "spread_mse": float(np.mean((cols - cols.mean(axis=1, keepdims=True)) ** 2)),
                         "target_var": float(np.var(cols))}
        summary[split] = {"n_bootstraps": int(k), "n_vectors": int(len(pool["coef"])), "pairs_per_row": int(per_row),
                          "rows": "training rows" if split == "train" else "test rows", "families": fam}
    return arrays, summary


def fit_arrays(arrays: Mapping[str, np.ndarray], mode: str, seed: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """Fit the three algorithms for one seed and mode.

    Returns ``{"arrays": {...}, "summary": {...}}``: in ``corrected`` mode the weight pool
    (:func:`pool_arrays`: ``pool_{train,heldout}_{coef,intercept,family,alpha,bootstrap,coef_scale,pairs}``);
    per algorithm ``coef_<a>`` (F,),
    ``intercept_<a>`` (scalar; 0 in ``reference_code``, where it is dropped), the
    prompt-encoded predictions ``pred_train_<a>``/``pred_test_<a>`` (``X w + b`` with
    the weights as the prompt carries them) and the training target ``target_train_<a>``
    (``corrected``: the algorithm's prediction; ``reference_code``: the log price).
    """
    if mode not in MODES:
        raise AmesFitError(f"ames mode must be one of {list(MODES)}, got {mode!r}")
    p = params
    for key in ("X_train", "y_train", "X_test", "y_test"):
        if key not in arrays:
            raise AmesFitError(f"prepared arrays lack {key!r} (not written by `ames prepare`?)")
    Xtr, ytr = np.asarray(arrays["X_train"], np.float64), np.asarray(arrays["y_train"], np.float64)
    Xte, yte = np.asarray(arrays["X_test"], np.float64), np.asarray(arrays["y_test"], np.float64)
    if Xtr.ndim != 2 or Xte.ndim != 2 or Xtr.shape[1] != Xte.shape[1] or len(Xtr) != len(ytr) or len(Xte) != len(yte):
        raise AmesFitError(f"prepared arrays have inconsistent shapes: X_train {Xtr.shape}, y_train {ytr.shape}, "
                           f"X_test {Xte.shape}, y_test {yte.shape}")
    if not (np.isfinite(Xtr).all() and np.isfinite(Xte).all() and np.isfinite(ytr).all() and np.isfinite(yte).all()):
        raise AmesFitError("prepared arrays hold NaN or infinite values")
    if mode == "corrected" and int(p["cv_folds"]) > len(Xtr):
        raise AmesFitError(f"ames.cv_folds = {p['cv_folds']} exceeds the {len(Xtr)} training rows")
    if mode == "reference_code":
        X_fit, y_fit, fit_rows = np.vstack([Xtr, Xte]), np.concatenate([ytr, yte]), "all (training and test rows)"
    else:
        X_fit, y_fit, fit_rows = Xtr, ytr, "training rows only"
    out: dict[str, np.ndarray] = {}
    summary: dict[str, Any] = {"mode": mode, "seed": int(seed), "fit_rows": fit_rows, "n_fit_rows": int(len(X_fit)),
                               "n_features": int(Xtr.shape[1]), "intercept_in_prompt": mode == "corrected",
                               "training_target": "algorithm prediction" if mode == "corrected" else "log1p(SalePrice)",
                               "algorithms": {}}
    for name in ALGORITHMS:
        t0 = time.perf_counter()
        est, alpha, extra = _fit_one(name, X_fit, y_fit, mode, seed, p)
        coef = np.asarray(est.coef_, dtype=np.float64).reshape(-1)
        b = float(est.intercept_) if mode == "corrected" else 0.0
        pred_tr, pred_te = Xtr @ coef + b, Xte @ coef + b
        out[f"coef_{name}"] = coef
        out[f"intercept_{name}"] = np.float64(b)
        out[f"pred_train_{name}"] = pred_tr
        out[f"pred_test_{name}"] = pred_te
        out[f"target_train_{name}"] = pred_tr if mode == "corrected" else ytr
        n_nonzero = int(np.count_nonzero(coef))
        summary["algorithms"][name] = {
            "estimator": SKLEARN_NAMES[name] + ("" if name == "linear" or mode == "reference_code" else "CV"),
            "alpha": alpha,
            "n_nonzero_coef": n_nonzero,
            "all_coef_zero": n_nonzero == 0,
            "max_abs_coef": float(np.abs(coef).max()) if coef.size else 0.0,
            "intercept_fitted": float(est.intercept_),
            "intercept_in_prompt": b,
            # MSE against the log price of the prediction the prompt encodes (reference_code: no intercept)
            "prompt_mse_test": float(np.mean((pred_te - yte) ** 2)),
            # ... and of scikit-learn's own predict() (with the fitted intercept)
            "sklearn_mse_test": float(np.mean((est.predict(Xte) - yte) ** 2)),
            "seconds": time.perf_counter() - t0,
            **extra,
        }
    if mode == "corrected":
        preds = {a: out[f"pred_test_{a}"] for a in ALGORITHMS}
        summary["algorithm_spread_test_mse"] = {
            f"{a}-{b}": float(np.mean((preds[a] - preds[b]) ** 2))
            for i, a in enumerate(ALGORITHMS) for b in ALGORITHMS[i + 1:]}
        t0 = time.perf_counter()
        pool, summary["pool"] = pool_arrays(Xtr, ytr, Xte, seed, p)
        summary["pool"]["seconds"] = time.perf_counter() - t0
        out.update(pool)
    return {"arrays": out, "summary": summary}


def fit_seed(mode: str, seed: int, prepared_npz: str | Path, out_npz: str | Path, out_json: str | Path,
             params: Mapping[str, Any]) -> dict[str, Any]:
    """Fit one seed's algorithms from its ``prepared.npz``; write ``fits.npz`` and a JSON summary.

    ``mode``: one of :data:`MODES`; ``seed``: of the CV folds' stream ``("ames", "cv")``; ``params``: the ``ames``
    section (the keys of :data:`FIT_KEYS` this mode reads, at least)."""
    from algo_emu.data.ames import load_prepared

    prepared_npz = Path(prepared_npz)
    if not prepared_npz.is_file():
        raise AmesFitError(f"{prepared_npz}: no such file (run `ames prepare` first)")
    try:
        arrays = load_prepared(prepared_npz)
    except (OSError, ValueError) as exc:
        raise AmesFitError(f"{prepared_npz}: not a prepared.npz ({type(exc).__name__}: {exc})") from None
    res = fit_arrays(arrays, mode, seed, params)
    summary = res["summary"]
    meta_path = prepared_npz.with_suffix(".json")
    if meta_path.is_file():
        meta = read_json(meta_path)
        summary["data"] = meta.get("input", {})
        summary["prepared_params"] = meta.get("params", {})
    keys = FIT_KEYS if mode == "corrected" else REFERENCE_FIT_KEYS
    summary["params"] = {k: params[k] for k in keys}
    with atomic_path(out_npz) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **res["arrays"])
        write_json(out_json, summary)
    a = summary["algorithms"]
    log.info("seed %d %s: alphas ridge %s lasso %s; lasso nonzero %d/%d; test MSE (prompt) %s", seed, mode,
             a["ridge"]["alpha"], a["lasso"]["alpha"], a["lasso"]["n_nonzero_coef"], summary["n_features"],
             {k: round(v["prompt_mse_test"], 4) for k, v in a.items()})
    return summary


def load_fits(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
