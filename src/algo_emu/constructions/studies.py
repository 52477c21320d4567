"""E5 experiments on the hand-built interpreter: error studies, the algorithm library, multi-step GD.

Every function takes the ``constructions`` config section as a loaded config gives it (validated, defaults
filled from workflow/schemas/constructions.schema.yaml: :func:`algo_emu.config.validate_section` outside the
workflow) and a list of seeds, and returns tidy pandas frames: one row per (setting, seed)
("per seed"), and the aggregate over seeds (mean, std, bootstrap CI via
:func:`algo_emu.tables.summarise`).  Random instances come from
``algo_emu.rng.torch_stream(seed, "constructions", <study>, ...)`` and do not depend
on the knob a study varies (beta, P), so a sweep compares the same instances.

Instance distribution (heads): X entries x_scale * U[-sqrt 3, sqrt 3]; W_K, W_Q (h x d,
h = key_ratio * d) and W_V (d x d) entries U[-sqrt 3, sqrt 3] / sqrt(d): unit variance, so
every scalar to be read out has variance about x_scale**2 and is bounded by
3 x_scale sqrt(d).  (``distribution: normal`` draws Gaussian entries instead; products of
Gaussians have heavy enough tails that, over thousands of draws, a value occasionally
falls outside any fixed grid, which the interpreter rejects with a ValueError.)
Target inverse temperature ``target_beta``.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import torch

from algo_emu.constructions.grid import Grid, readout_bound
from algo_emu.constructions.interpreter import DEFAULT_END_TOL, DTYPE, Capacity, Interpreter
from algo_emu.constructions.programs import (
    attention_head,
    compile_prompt,
    gd_multistep,
    gd_step_emulated,
    gd_step_exact,
    head_program,
    make_loss,
    run,
    template_exact,
    template_program,
)
from algo_emu.io import tensor_digest
from algo_emu.rng import torch_stream
from algo_emu.tables import summarise

STUDIES = ("beta", "p", "n", "d")

def module_fingerprint(interp: Interpreter) -> str:
    """sha256 over every weight tensor of the module (name, dtype, shape, bytes; sorted by name)."""
    return tensor_digest(sorted(interp.state_dict().items()))


# ----------------------------------------------------------------------------------------- heads
def draw_heads(seed: int, n: int, d: int, h: int, count: int, x_scale: float = 1.0, tag: str = "heads",
               distribution: str = "uniform"):
    """``count`` random (X, W_K, W_Q, W_V) from the stream ("constructions", tag, n, d, h); unit-variance entries
    (uniform on [-sqrt 3, sqrt 3] or standard normal), weights scaled by 1/sqrt(d)."""
    gen = torch_stream(seed, "constructions", tag, distribution, n, d, h)
    if distribution == "uniform":
        def draw(*shape):
            return math.sqrt(3.0) * (2.0 * torch.rand(*shape, generator=gen, dtype=DTYPE) - 1.0)
    elif distribution == "normal":
        def draw(*shape):
            return torch.randn(*shape, generator=gen, dtype=DTYPE)
    else:
        raise ValueError(f"distribution must be uniform or normal, got {distribution!r}")
    X = x_scale * draw(count, d, n)
    sd = 1.0 / math.sqrt(d)
    WK = sd * draw(count, h, d)
    WQ = sd * draw(count, h, d)
    WV = sd * draw(count, d, d)
    return X, WK, WQ, WV


def head_errors(interp: Interpreter, X, WK, WQ, WV, target_beta: float, table: str = "auto",
                end_tol: float | None = None) -> dict[str, torch.Tensor]:
    """Per-instance errors of the emulated head: output MSE and max error, read-out (K, Q, V) MSE,
    the largest |u^T x| read out, and the stated bound on the max error (sampled identity tables).

    With ``end_tol``, also ``end_flagged``: the fraction of the instance's read-out values that lie
    within the end margin for ``end_tol`` (:meth:`Interpreter.near_end`), i.e. whose error that
    tolerance does not cover.  An interpreter with its own ``end_tol`` refuses such prompts instead."""
    prog = head_program(X, WK, WQ, WV, target_beta)
    prompt = compile_prompt(interp, prog, table)
    Y, Z = interp(prompt.E, return_hidden=True)
    out = prompt.decode(Y)
    ref = attention_head(X, WK, WQ, WV, target_beta)
    n = X.shape[2]
    h, dv = WK.shape[1], WV.shape[1]
    cap = interp.cap
    slots = list(range(h)) + list(range(cap.h, cap.h + h)) + list(range(2 * cap.h, 2 * cap.h + dv))
    exact = interp.readout_values(prompt.E)[:, slots, :n]
    approx = Z[:, slots, :n]
    err = out - ref
    res = {
        "mse": (err**2).mean(dim=(1, 2)),
        "max_abs": err.abs().amax(dim=(1, 2)),
        "kqv_mse": ((approx - exact) ** 2).mean(dim=(1, 2)),
        "max_abs_s": exact.abs().amax(dim=(1, 2)),
        "target_ms": (ref**2).mean(dim=(1, 2)),
    }
    if end_tol is not None:
        res["end_flagged"] = interp.near_end(prompt.E, end_tol)[:, slots, :n].to(DTYPE).mean(dim=(1, 2))
    if table in ("auto", "sample"):
        # stated bound: read-out bound per scalar (incl. float64 rounding), then the softmax perturbation
        Xa = X.abs()
        dot_abs = torch.cat([(target_beta * WK).abs() @ Xa, WQ.abs() @ Xa, WV.abs() @ Xa], dim=1)
        eps = torch.as_tensor(readout_bound(exact.numpy(), interp.grid, interp.beta, dot_abs.numpy(), X.shape[1]),
                              dtype=DTYPE)
        eK, eQ, eV = eps[:, :h].amax(dim=(1, 2)), eps[:, h : 2 * h].amax(dim=(1, 2)), eps[:, 2 * h :].amax(dim=(1, 2))
        K, Q, V = exact[:, :h], exact[:, h : 2 * h], exact[:, 2 * h :]
        mK, mQ, mV = K.abs().amax(dim=(1, 2)), Q.abs().amax(dim=(1, 2)), V.abs().amax(dim=(1, 2))
        # |score error| <= h (eK mQ + eQ mK + eK eQ) plus layer-2 rounding (h + 2) eps' (mK + eK)(mQ + eQ)
        u = float(np.finfo(np.float64).eps)
        delta = h * (eK * mQ + eQ * mK + eK * eQ) + (h + 2) * u * (mK + eK) * (mQ + eQ)
        # weights move by a factor within exp(+-2 delta); values by eV; the weighted sum of n values rounds
        res["bound"] = eV + torch.expm1(2.0 * delta) * (mV + eV) + (n + 4) * u * (mV + eV)
    else:
        res["bound"] = torch.full_like(res["mse"], float("nan"))
    return res


def _head_interp(d: int, h: int, grid: Grid, beta: float) -> Interpreter:
    # end_tol=None: the studies measure the error near the ends too; head_errors flags those values
    return Interpreter(Capacity(d, h, d), grid, beta, end_tol=None)


def _study_settings(study: str, cfg: dict) -> list[dict]:
    base = {"n": cfg["n"], "d": cfg["d"], "P": cfg["P"], "beta_d2": cfg["beta_d2"], "beta": None}
    if study == "beta":
        return [dict(base, beta_d2=float(b), policy="beta*D^2") for b in cfg["beta_study"]["beta_d2"]]
    if study == "p":
        rows = []
        for b in cfg["p_study"]["beta_d2"]:
            rows += [dict(base, P=int(P), beta_d2=float(b), policy=f"beta*D^2={b:g}") for P in cfg["p_study"]["P"]]
        for b in cfg["p_study"]["beta"]:
            rows += [dict(base, P=int(P), beta_d2=None, beta=float(b), policy=f"beta={b:g}") for P in cfg["p_study"]["P"]]
        return rows
    if study == "n":
        return [dict(base, n=int(n), P=int(cfg["n_study"]["P"]), policy="beta*D^2") for n in cfg["n_study"]["n"]]
    if study == "d":
        return [dict(base, d=int(d), P=int(cfg["d_study"]["P"]), policy="beta*D^2") for d in cfg["d_study"]["d"]]
    raise ValueError(f"unknown study {study!r}; choose from {STUDIES}")


def run_study(study: str, params: Mapping, seeds: Iterable[int]) -> pd.DataFrame:
    """Per-seed rows of one error study (``beta``, ``p``, ``n`` or ``d``) on the attention-head program."""
    cfg = params
    seeds = [int(s) for s in seeds]
    rows = []
    for st in _study_settings(study, cfg):
        n, d, P = st["n"], st["d"], st["P"]
        h = int(cfg["key_ratio"]) * d
        grid = Grid.symmetric(cfg["grid_half_width"], P)
        beta = grid.beta_for(st["beta_d2"]) if st["beta"] is None else st["beta"]
        interp = _head_interp(d, h, grid, beta)
        draws = [draw_heads(s, n, d, h, cfg["instances"], cfg["x_scale"], distribution=cfg["distribution"]) for s in seeds]
        cat = [torch.cat([dr[i] for dr in draws]) for i in range(4)]
        res = head_errors(interp, *cat, cfg["target_beta"], cfg["table"], cfg["end_tol"])
        margin = interp.margin_for(cfg["end_tol"])
        k = cfg["instances"]
        for i, s in enumerate(seeds):
            sl = slice(i * k, (i + 1) * k)
            rows.append({
                "study": study, "policy": st["policy"], "n": n, "d": d, "h": h, "P": P, "D": grid.D,
                "beta": beta, "beta_d2": beta * grid.D**2, "grid_half_width": grid.hi, "seed": s,
                "mse": float(res["mse"][sl].mean()), "max_abs": float(res["max_abs"][sl].max()),
                "kqv_mse": float(res["kqv_mse"][sl].mean()), "bound": float(res["bound"][sl].max()),
                "max_abs_s": float(res["max_abs_s"][sl].max()), "target_ms": float(res["target_ms"][sl].mean()),
                "instances": k, "end_margin": margin, "end_flagged": float(res["end_flagged"][sl].mean()),
            })
    return pd.DataFrame(rows)


def _fit_loglog(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (y > 0) & np.isfinite(y)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


FLOOR = 1e-26  # below this the MSE is float64 rounding, not the mechanism


def summarise_study(per_seed: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: mean/std/CI over seeds of the output MSE, plus read-out MSE, max error, bound, fits.

    Fits (where the theory gives a rate):
    * ``p`` at fixed ``beta D**2``: the interior read-out error is exactly ``D`` times a periodic
      function of ``s / D``, so the MSE scales as ``D**2 ~ P**-2`` once the ends no longer matter;
      ``fit_slope`` is the log-log slope over the upper half of the P range (points above the
      float64 floor ``1e-26``), ``theory_slope = -2``.
    * ``beta``: on the falling branch (beta below the minimiser) the error is the truncation at the
      grid ends, ``MSE ~ exp(-beta delta**2)`` with ``delta`` the distance of the extreme value to
      the end; ``fit_rate`` is ``-d log MSE / d beta`` there and ``theory_rate = (R - max|s|)**2``.
    """
    keys = ["study", "policy", "n", "d", "h", "P", "D", "beta", "beta_d2", "grid_half_width"]
    out = []
    for key, grp in per_seed.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key))
        row.update(summarise(grp["mse"].to_numpy(), "mse"))
        row["kqv_mse_mean"] = float(grp["kqv_mse"].mean())
        row["max_abs_max"] = float(grp["max_abs"].max())
        row["bound_max"] = float(grp["bound"].max())
        row["max_abs_s"] = float(grp["max_abs_s"].max())
        row["end_margin"] = float(grp["end_margin"].iloc[0])
        row["end_flagged_mean"] = float(grp["end_flagged"].mean())
        out.append(row)
    df = pd.DataFrame(out)
    df["fit_slope"] = np.nan
    df["theory_slope"] = np.nan
    df["fit_rate"] = np.nan
    df["theory_rate"] = np.nan
    study = df["study"].iloc[0] if len(df) else None
    if study == "p":
        for pol, grp in df.groupby("policy", sort=False):
            if not pol.startswith("beta*D^2"):
                continue
            sub = grp[(grp["P"] >= grp["P"].median()) & (grp["mse_mean"] > FLOOR)]
            df.loc[grp.index, "fit_slope"] = _fit_loglog(sub["P"] - 1, sub["mse_mean"])
            df.loc[grp.index, "theory_slope"] = -2.0
    if study == "beta" and len(df) > 2:
        srt = df.sort_values("beta")
        imin = int(np.argmin(srt["mse_mean"].to_numpy()))
        sub = srt.iloc[: imin + 1]
        sub = sub[sub["mse_mean"] > FLOOR]
        if len(sub) >= 2:
            df["fit_rate"] = float(-np.polyfit(sub["beta"], np.log(sub["mse_mean"]), 1)[0])
        df["theory_rate"] = float((df["grid_half_width"].iloc[0] - df["max_abs_s"].max()) ** 2)
    return df


# ----------------------------------------------------------------------------------------- GD data
def draw_regression(seed: int, tag: str, n: int, d: int, count: int, noise: float, w_scale: float, w0_scale: float,
                    labels: str):
    """X ~ N(0, I), w* ~ N(0, w_scale^2 I/d), y = X^T w* + noise (``labels="real"``) or sign(.) (``"sign"``),
    start w0 ~ N(0, w0_scale^2 I/d)."""
    gen = torch_stream(seed, "constructions", tag, n, d)
    X = torch.randn(count, d, n, generator=gen, dtype=DTYPE)
    w_star = w_scale * torch.randn(count, d, generator=gen, dtype=DTYPE) / math.sqrt(d)
    eps = noise * torch.randn(count, n, generator=gen, dtype=DTYPE)
    w0 = w0_scale * torch.randn(count, d, generator=gen, dtype=DTYPE) / math.sqrt(d)
    y = torch.einsum("bd,bdn->bn", w_star, X) + eps
    if labels == "sign":
        y = torch.where(y >= 0, 1.0, -1.0).to(DTYPE)
    return X, y, w0


ALGORITHMS = ("attention_head", "gd_squared", "gd_ridge", "gd_logistic", "gd_huber", "template_tanh")


def library_interpreter(lib: dict, end_tol: float = DEFAULT_END_TOL) -> Interpreter:
    """ONE interpreter whose capacity covers every algorithm of the library (refusing values within the end margin)."""
    n, d = int(lib["n"]), int(lib["d"])
    cap = Capacity(d_in=max(2 * d + 4 + n, d), h=max(n + 1, 2, 2 * d), dv=d)
    grid = Grid.symmetric(lib["grid_half_width"], int(lib["P"]))
    return Interpreter(cap, grid, grid.beta_for(lib["beta_d2"]), end_tol=end_tol)


def run_algorithm(interp: Interpreter, name: str, lib: dict, seeds: Iterable[int], table: str = "auto"):
    """Emulated and exact outputs of one library algorithm; instances of all seeds in one batch
    (``instances`` per seed, seed-major)."""
    n, d, k = int(lib["n"]), int(lib["d"]), int(lib["instances"])
    seeds = [int(s) for s in seeds]

    def cat(draws):
        return [torch.cat([dr[i] for dr in draws]) for i in range(len(draws[0]))]

    if name == "attention_head":
        X, WK, WQ, WV = cat([draw_heads(s, n, d, 2 * d, k, 1.0, tag="library_head") for s in seeds])  # uniform
        prog = head_program(X, WK, WQ, WV, 1.0)
        return run(interp, prog, table), attention_head(X, WK, WQ, WV, 1.0)
    if name.startswith("gd_"):
        loss_name = name[3:]
        loss = make_loss(loss_name, lib["huber_delta"])
        ridge = float(lib["ridge"]) if loss_name == "ridge" else 0.0
        X, y, w0 = cat([draw_regression(s, f"library_{loss_name}", n, d, k, lib["noise"], lib["w_scale"],
                                        lib["w0_scale"], "sign" if loss_name == "logistic" else "real") for s in seeds])
        emu = gd_step_emulated(interp, w0, X, y, loss, lib["eta"], ridge, table, lib["gate"], lib["r_range"])
        return emu, gd_step_exact(w0, X, y, loss, lib["eta"], ridge)
    if name == "template_tanh":
        loss = make_loss("tanh")
        X, y, w0 = cat([draw_regression(s, "library_tanh", n, d, k, lib["noise"], lib["w_scale"], lib["w0_scale"], "real")
                        for s in seeds])
        prog = template_program(interp, w0, X, y, loss, mode="per_sample", gate=lib["gate"], r_range=lib["r_range"])
        return run(interp, prog, table), template_exact(w0, X, y, loss)
    raise ValueError(f"unknown library algorithm {name!r}; choose from {ALGORITHMS}")


def run_library(params: Mapping, seeds: Iterable[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every library algorithm through ONE interpreter object; per-seed rows and the summary table.

    The module's weights are fingerprinted (sha256) before and after; a change raises.
    """
    cfg = params
    lib = cfg["library"]
    seeds = [int(s) for s in seeds]
    k = int(lib["instances"])
    interp = library_interpreter(lib, cfg["end_tol"])
    before = module_fingerprint(interp)
    rows = []
    for name in lib["algorithms"]:
        emu, ref = run_algorithm(interp, name, lib, seeds, cfg["table"])
        for i, s in enumerate(seeds):
            e, r = emu[i * k : (i + 1) * k], ref[i * k : (i + 1) * k]
            err = e - r
            rows.append({
                "algorithm": name, "seed": s, "mse": float((err**2).mean()), "max_abs": float(err.abs().max()),
                "rel_mse": float((err**2).mean() / (r**2).mean()), "target_ms": float((r**2).mean()),
            })
    after = module_fingerprint(interp)
    if after != before:  # pragma: no cover - would mean the module was modified
        raise RuntimeError("the interpreter's weights changed while running the library")
    per_seed = pd.DataFrame(rows)
    per_seed["module_sha256"] = after
    out = []
    for name, grp in per_seed.groupby("algorithm", sort=False):
        row = {"algorithm": name}
        row.update(summarise(grp["mse"].to_numpy(), "mse"))
        row["max_abs_max"] = float(grp["max_abs"].max())
        row["rel_mse_mean"] = float(grp["rel_mse"].mean())
        row.update({"P": interp.grid.P, "grid_half_width": interp.grid.hi, "beta": interp.beta,
                    "beta_d2": interp.beta * interp.grid.D**2, "n": lib["n"], "d": lib["d"],
                    "capacity": f"d_in={interp.cap.d_in},h={interp.cap.h},dv={interp.cap.dv}",
                    "module_sha256": after[:16], "end_tol": interp.end_tol, "end_margin": interp.end_margin})
        out.append(row)
    return per_seed, pd.DataFrame(out)


# ----------------------------------------------------------------------------------------- multistep
def run_multistep(params: Mapping, seeds: Iterable[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stacked GD modules: error after t steps vs the bound t * eps (eps = largest one-step error).

    Per instance: ``err_t = ||w^_t - w_t||`` (emulated vs exact GD from the same start),
    ``eps = max_s ||w^_(s+1) - GD(w^_s)||`` over the run.  For an L-smooth convex loss and
    ``eta <= 2 / L`` the GD map is non-expansive in l2, so ``err_t <= sum_s eps_s <= t eps``
    (proved in l2; in l-infinity, the paper's norm, only measured).
    """
    cfg = params
    ms = cfg["multistep"]
    n, d, k, T = int(ms["n"]), int(ms["d"]), int(ms["instances"]), int(ms["steps"])
    grid = Grid.symmetric(ms["grid_half_width"], int(ms["P"]))
    interp = Interpreter(Capacity(2 * d + 4, 2, d), grid, grid.beta_for(ms["beta_d2"]), end_tol=cfg["end_tol"])
    seeds = [int(s) for s in seeds]
    rows = []
    for loss_name in ms["losses"]:
        loss = make_loss(loss_name, ms["huber_delta"])
        ridge = float(ms["ridge"]) if loss_name == "ridge" else 0.0
        draws = [draw_regression(s, f"multistep_{loss_name}", n, d, k, ms["noise"], ms["w_scale"], ms["w0_scale"],
                                 "sign" if loss_name == "logistic" else "real") for s in seeds]
        X, y, w0 = (torch.cat([dr[i] for dr in draws]) for i in range(3))
        tr = gd_multistep(interp, w0, X, y, loss, ms["eta"], T, ridge, cfg["table"], ms["gate"], ms["r_range"])
        diff = tr["w_hat"] - tr["w_exact"]  # (T+1, B, d)
        err_inf, err_2 = diff.abs().amax(dim=2), diff.norm(dim=2)
        eps_inf, eps_2 = tr["local_inf"].amax(dim=0), tr["local_2"].amax(dim=0)  # (B,)
        cum_2 = torch.cumsum(tr["local_2"], dim=0)
        for i, s in enumerate(seeds):
            sl = slice(i * k, (i + 1) * k)
            for t in range(1, T + 1):
                rows.append({
                    "loss": loss_name, "seed": s, "t": t,
                    "err_inf": float(err_inf[t, sl].mean()), "err_2": float(err_2[t, sl].mean()),
                    "eps_inf": float(eps_inf[sl].mean()), "eps_2": float(eps_2[sl].mean()),
                    "bound_inf": float((t * eps_inf[sl]).mean()), "bound_2": float((t * eps_2[sl]).mean()),
                    "ratio_inf_max": float((err_inf[t, sl] / (t * eps_inf[sl])).max()),
                    "ratio_2_max": float((err_2[t, sl] / cum_2[t - 1, sl]).max()),
                    "within_inf": float((err_inf[t, sl] <= t * eps_inf[sl] * (1 + 1e-9)).double().mean()),
                    "within_2": float((err_2[t, sl] <= cum_2[t - 1, sl] * (1 + 1e-9) + 1e-15).double().mean()),
                    "w_norm": float(tr["w_exact"][t, sl].norm(dim=1).mean()),
                })
    per_seed = pd.DataFrame(rows)
    out = []
    for (loss_name, t), grp in per_seed.groupby(["loss", "t"], sort=False):
        row = {"loss": loss_name, "t": t}
        row.update(summarise(grp["err_inf"].to_numpy(), "err_inf"))
        row["err_2_mean"] = float(grp["err_2"].mean())
        row["eps_inf_mean"] = float(grp["eps_inf"].mean())
        row["bound_inf_mean"] = float(grp["bound_inf"].mean())
        row["bound_2_mean"] = float(grp["bound_2"].mean())
        row["ratio_inf_max"] = float(grp["ratio_inf_max"].max())
        row["ratio_2_max"] = float(grp["ratio_2_max"].max())
        row["within_inf"] = float(grp["within_inf"].mean())
        row["within_2"] = float(grp["within_2"].mean())
        row.update({"P": grid.P, "beta_d2": ms["beta_d2"], "eta": ms["eta"], "end_tol": interp.end_tol,
                    "end_margin": interp.end_margin})
        out.append(row)
    return per_seed, pd.DataFrame(out)
