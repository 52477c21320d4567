"""Every table's caption, in one place: the text written above each results/tables/*.md and into each .tex.

A caption says what the table's columns are, how they were made (the scale, the device, where the paper's
values come from) and, where a table carries one, a reading of the numbers against the weight-blind
baseline. The experiment modules call these functions with their parameters and per-seed runs; the
Snakemake report's panels (workflow/report/*.rst) say what a figure or table is for and point here for
the columns rather than restating them.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from algo_emu import paper_values

def data_provenance(metrics: Sequence[dict]) -> str:
    """One line: source, rows, sha256 prefix, fallback (from the prepared sidecars, via the fits)."""
    seen = {}
    for m in metrics:
        d = m.get("data") or {}
        seen[(d.get("source"), d.get("n_rows"), d.get("sha256"), str(d.get("fallback")))] = d
    parts = []
    for d in seen.values():
        text = f"source {d.get('source')}, {d.get('n_rows')} rows, sha256 {str(d.get('sha256'))[:12]}"
        fb = d.get("fallback")
        text += (f", FALLBACK {fb.get('from')} -> {fb.get('to')} ({fb.get('reason')})" if isinstance(fb, dict)
                 else ", no fallback")
        parts.append(text)
    return "; ".join(parts) or "unknown"


def ames_lasso_note(runs: pd.DataFrame) -> str:
    sel = runs[(runs["mode"] == "reference_code") & (runs.algorithm == "lasso")]
    if sel.empty:
        return ""
    k, n = int(sel.all_coef_zero.astype(bool).sum()), len(sel)
    verdict = "zeroed every coefficient" if k == n else "did NOT zero every coefficient"
    return (f" Checked on the fits: in reference_code mode Lasso(alpha={sel.alpha.iloc[0]:g}) {verdict} in {k}/{n} "
            f"seeds (mean nonzero {sel.n_nonzero_coef.mean():g} of {sel.n_features.mean():g}), so its prompt "
            f"carries w = 0 and the emulator can only ignore it.")


def ames_findings(table: pd.DataFrame) -> str:
    """One sentence per mode, stating only what the numbers show (read against the weight-blind baseline)."""
    out = []
    for mode in dict.fromkeys(table["mode"]):
        t = table[table["mode"] == mode].set_index("algorithm")
        ratios = ", ".join(f"{a} {t.loc[a, 'mse_over_blind']:.2f}" for a in t.index)
        if t.mse_over_blind.isna().all():
            continue
        lower = [a for a in t.index if t.loc[a, "mse_over_blind"] < 1]
        not_lower = [a for a in t.index if not t.loc[a, "mse_over_blind"] < 1]
        verdict = "; ".join(x for x in (
            f"lower MSE than the weight-blind baseline on {', '.join(lower)}" if lower else "",
            f"NOT lower on {', '.join(not_lower)}" if not_lower else "") if x)
        out.append(f"{mode}: MSE / weight-blind MSE = {ratios}; {verdict} (means over seeds; "
                   f"see ames_ablation for what the model reads).")
    return " ".join(out)


def ames(runs: pd.DataFrame, metrics: Sequence[dict], table: pd.DataFrame | None = None) -> str:
    m0 = metrics[0]
    section = m0["params"]
    devices = ", ".join(sorted(runs.device.unique()))
    hidden = ", ".join(str(h) for h in sorted(runs.hidden.unique()))
    n_tr, n_te = m0["n_train"], m0["n_test"]
    pool = next((m["fit"].get("pool") for m in metrics if m["mode"] == "corrected" and m["fit"].get("pool")), None)
    fp = next((m["fit"].get("params") for m in metrics if m["mode"] == "corrected"), None) or {}
    pool_text = ""
    if pool:
        pool_text = (
            f" corrected trains on a weight pool per seed: {pool['train']['n_vectors']} vectors ("
            f"Ridge refits on {pool['train']['n_bootstraps']} bootstrap resamples x {fp.get('pool_n_alphas')} alphas "
            f"10^{fp.get('pool_log10_alpha_min')}..10^{fp.get('pool_log10_alpha_max')}, and one perturbed copy of each: "
            f"w scaled by U({fp.get('pool_coef_scale_min')}, {fp.get('pool_coef_scale_max')}) plus a random direction "
            f"and intercept shift of {fp.get('pool_perturb_scale')} x std(y)), each training row paired with "
            f"{pool['train']['pairs_per_row']} of them; heldout_refit/heldout_perturbed rows: test rows with vectors "
            f"from {pool['heldout']['n_bootstraps']} other resamples, never seen in training "
            f"({pool['heldout']['pairs_per_row']} per test row). The three algorithms' fits are not in the training "
            f"pool either.")
    text = (
        "Ames Housing: one frozen emulator per seed and mode, evaluated on the held-out rows. Rows linear/ridge/lasso: "
        "each algorithm's weights in the one-token prompt; emulation_mse: emulator vs the prediction the prompt "
        "encodes; prediction_mse: emulator vs log price; algorithm_mse: the algorithm's prediction vs log price "
        "(mean, sample std over seeds; CI: 95% bootstrap of the mean). spread_mse: algorithm rows, the mean MSE between "
        "this algorithm's test predictions and the other two's; held-out rows, the mean squared deviation of the "
        "family's predictions from their per-row mean (what ignoring w costs at best). blind_mse: a weight-blind "
        "baseline (same block, hidden width, heads, p, prompts, targets, data order, epochs, batch, lr; weight "
        "columns removed from its input) against the same target; mse_over_blind: the emulator's MSE against the "
        "mode's target / blind_mse (1 = no better than ignoring the weights). corrected: fit on training rows, "
        "intercept in the prompt, Ridge/Lasso alpha by seeded K-fold CV, target = the prompt's encoded prediction."
        f"{pool_text} reference_code (the published code): fit on all rows, intercept dropped, alpha = 1, target = "
        "log price for every algorithm, so the weights cannot matter there by construction and algorithm_mse is "
        "the intercept-free prediction's error."
        f"{ames_lasso_note(runs)} Data: {data_provenance(metrics)}; {n_tr} training / {n_te} test rows per seed. "
        f"Emulator: n = 1 token, p = {section['total_tokens']}, H = {section['heads']}, h = {hidden}, d_out = 1; "
        f"{section['epochs']} epochs, batch {section['batch_size']}, Adam lr {section['lr']}. Frozen parameters (emulator and "
        f"baseline) bit-identical before and after evaluation: {bool(runs.bit_identical.all())}. Device: {devices}."
    )
    if table is not None:
        text += " Read against the baseline: " + ames_findings(table)
    return text


def ames_ablation(ablations: pd.DataFrame, metrics: Sequence[dict]) -> str:
    section = metrics[0]["params"]
    return (
        "Ames Housing, prompt ablations (algo_emu.ablation): the frozen emulator's MSE against the ORIGINAL prompt's "
        "target when the prompt's weights (w, and b in corrected) are replaced; mean, sample std and 95% bootstrap "
        "CI over seeds. none: unablated; weight_blind: the weight-blind baseline (same block, budget, prompts and "
        "targets, no weight columns); other_prompt: another prompt's vector (held-out sets); other_algorithm: the "
        "next algorithm's fit (linear->ridge->lasso->linear); permuted: coordinates permuted per prompt; random: "
        "normal draws rescaled to the prompt's own norm per block; zeros: all weights zero. A model that reads the "
        "weights gets much worse under ablation than 'none'; one that ignores them scores the same. "
        "mse_over_blind = mse_mean / weight_blind's mse_mean. "
        f"p = {section['total_tokens']}, H = {section['heads']}, {section['epochs']} epochs."
    )


def statistical(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return ("Statistical algorithms (Appendix C.1): one model per seed trained on a mixture of algorithms, frozen, "
            f"evaluated per algorithm on {params['eval_prompts']} fresh prompts per seed (mean, sample std, 95% bootstrap "
            "CI over seeds; each seed a full independent run). mse = the headline named by mse_is: reference_code mode, "
            "the paper's loss against the noisy y; fitted mode, the emulation error against the algorithm's own "
            "prediction at the query. emulation / prediction / alg_error: model vs the algorithm's prediction, model vs "
            "noisy y, the algorithm itself vs noisy y. mse_over_blind = mse_mean / the mean mse of the weight-blind "
            "baseline (the same block, data, data order and budget, trained on tokens without the weights). What the "
            "model is asked to do: the algorithm is run outside the model and its weights are written into every "
            "token, so in both modes the model's task is to compute x^T w (+ b) from weights in the prompt; rows of "
            "different algorithms differ in the weights' distribution, not in a procedure the model runs. Whether the "
            "model uses the weights, and in fitted mode the context (x, y of the labelled examples), is what "
            "statistical_ablation measures. "
            f"N={params['n_prompts']}, n={params['n_context']} context (+{params['n_query']} query in fitted mode), "
            f"d={params['d']}, h={params['hidden']}, p={params['p']}, {params['epochs']} epochs, batch "
            f"{params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values (reference_code rows): {paper_values.STATISTICAL_HEADS['source']}.")


def statistical_ablation(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return ("Statistical algorithms (Appendix C.1), prompt ablations: each frozen model (parameters bit-identical "
            "before and after) on the same fresh prompts with the weights in every token replaced by another "
            "prompt's (other_prompt), those the next algorithm of the mixture fitted on the same context "
            "(other_algorithm), the same weights permuted (permuted), a standard normal vector of the same norm "
            "(random) or zeros (zeros); fitted mode also with the context tokens' x and y zeroed (context_zeroed; "
            "weights and queries kept). The target is always the original prompt's (mse as in statistical_emulation: "
            "fitted, vs the algorithm's prediction; reference_code, vs the noisy y). none = unablated; weight_blind "
            "= the baseline trained without the weights. mse_over_blind = mse_mean / the baseline's mse_mean. "
            "An ablated MSE close to none means that part of the prompt is not used; context_zeroed close to none "
            "means the model computes x_q^T w from the weights and does not use the labelled examples. "
            f"N={params['n_prompts']}, {params['epochs']} epochs, h={params['hidden']}, p={params['p']}, "
            f"{params['eval_prompts']} evaluation prompts per algorithm and seed. Device: {devices}.")


def heads(params: dict, runs: pd.DataFrame, what: str, missing: list[str] | None = None) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    hashes = sorted(runs.sweep_config_hash.unique())
    text = (f"{what}. Test MSE of the composed head on the held-out {params['test_fraction']:.0%} "
            f"(mean, sample std and 95% bootstrap CI over seeds). Protocol `published` (the published code's: one data "
            f"set and target head for all seeds, softmax over queries = target `reference_code`, metric = mean of "
            f"per-batch means of batch {params['eval_batch_size']}): the paper's values stand beside its "
            f"`reference_code` rows only. Protocol `independent` (ours: a data set and head per seed, exact mean; "
            f"headline target `{params['target']}`). Target `paper` = softmax over keys (the paper's definition). "
            f"target_var_mean = variance of the target output Y (a model that predicts a constant scores about this). "
            f"N={params['n_prompts']}, n={params['n_tokens']}, d={params['d']}, h={params['hidden']}, "
            f"{params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values: {paper_values.HEADS_TABLE['source']}.")
    if missing:
        text += f" PARTIAL: {len(missing)} rows missing ({'; '.join(missing)})."
    if len(hashes) > 1:
        text += f" MIXED: records of {len(hashes)} different configurations ({', '.join(hashes)})."
    return text


def theorem31_setup(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return (f"x {params['x_dist']} (scale {params['x_scale']}), y, w standard normal; N={params['n_prompts']} "
            f"(test {params['test_fraction']:.0%}), n={params['n_tokens']}, d={params['d']}, h={params['hidden']}, "
            f"H={params['heads']}, {params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}. "
            f"Device: {devices}. The paper reports no number for this experiment.")


#: E2's f_emulation and f_emulation_ablation tables, before the set-up sentence (:func:`theorem31_setup`).
THEOREM31 = {
    "f": ("Theorem 3.1: one softmax head emulating f(w^T x_i - y_i) x_i at every token. Test MSE on the "
          "held-out prompts (mean, sample std, 95% bootstrap CI over seeds) and rel_mse = MSE / Var(target) "
          "(1 = predicting the mean). mse_over_blind = MSE / the MSE of the weight-blind baseline (the same "
          "block, data, data order and budget on tokens [x_i; y_i] without w); blind_rel_mse_mean = that "
          "baseline's MSE / Var(target). Part of every target is predictable without w (x_i/2 for sigmoid and "
          "step), so rel_mse is to be read against blind_rel_mse_mean, not against 1: only mse_over_blind < 1 "
          "shows that the weights in the prompt are used. p = tokens after appending p - n learnable tokens. "),
    "ablation": ("Theorem 3.1, prompt ablations: the trained model, frozen (parameters bit-identical before and after), "
                 "on the held-out prompts with w in every token replaced by another prompt's w (other_prompt), the same "
                 "w with its coordinates permuted (permuted), a standard normal vector of the same norm (random) or "
                 "zeros (zeros); the target is always the original prompt's f(w^T x_i - y_i) x_i. none = unablated; "
                 "weight_blind = the baseline trained without w. mse_over_blind = mse_mean / the baseline's mse_mean: "
                 "an ablated MSE near the unablated one would mean the model ignores w; near or above 1 means the "
                 "ablation removed what the model had learnt from w. "),
}


def theorem31(table: str, params: dict, runs: pd.DataFrame) -> str:
    """The caption of E2's ``table`` (``f``, ``ablation`` or ``gd``)."""
    if table == "gd":
        return theorem31_gd(params, runs)
    return THEOREM31[table] + theorem31_setup(params, runs)


def theorem31_gd(params: dict, runs: pd.DataFrame) -> str:
    return ("Corollary 3.1.2: the model's per-token outputs averaged with u = (1/n) 1 give the step "
            f"w - eta u^T g (eta = {params['gd_eta']}); error against the exact step w - eta (1/n) sum_i "
            "f(w^T x_i - y_i) x_i. gd_mse: mean squared error per coordinate; gd_rel: squared error / squared "
            "norm of the exact step (eta-free; 1 = not moving w). " + theorem31_setup(params, runs))


def heads_variants(params: dict, names: str) -> str:
    return (
        f"E1 variants (ours, not paper-comparable: heads.variants; {names}). Per variant, seed and member (K/Q/V: an "
        "emulator, its test MSE against its projection; head: the composed head, the protocol's headline quantity): "
        "the final test MSE, the minimum over the evaluated epochs and its epoch, the train loss at the listed epochs "
        "and its relative fall over the last tenth of the epochs. Rows with source = protocol are the protocol's own "
        "run of the same setting and seed, where its records exist. paper_mse: the paper's value for that H, beside "
        f"the composed head of the published protocol at p = {params['p_heads_sweep']} only "
        f"({paper_values.HEADS_TABLE['source']}).")


_ENDS = (" end_flagged_mean: fraction of read-out values within end_margin of a grid end, where the "
         "error can exceed constructions.end_tol (1 where the margin covers the whole grid).")
_REFUSED = (" Every value read out lay at least end_margin from the grid ends (constructions.end_tol); a closer one "
            "stops the run with an error.")
#: E5's tables, by kind (no parameters: the tables carry their grids).
CONSTRUCTIONS = {
    "beta": "E5: hand-built two-layer attention emulating a random attention head; output MSE against the read-out "
            "sharpness beta*D^2 (fixed grid), mean over seeds." + _ENDS,
    "p": "E5: output MSE against the prompt length P (grid tokens) for fixed beta*D^2 and fixed beta; "
         "fit_slope is the log-log slope over the upper half of P (theory -2 at fixed beta*D^2)." + _ENDS,
    "n": "E5: output MSE against the number of data tokens n (P fixed)." + _ENDS,
    "d": "E5: output MSE against the data dimension d (h = key_ratio * d, P fixed)." + _ENDS,
    "library": "E5 (Corollary 4.2.1): one frozen interpreter runs every algorithm, switched by the prompt alone; "
               "error against the exact algorithm." + _REFUSED,
    "multistep": "E5: stacked GD modules; l-infinity error after t steps against exact GD, and the bound t*eps "
                 "(eps = largest one-step error of the run)." + _REFUSED,
}

ESSAY_EQUIVALENCES = ("E6: hand-built attention vs in-context least squares in float64 (no training). "
                      "max_abs_err: prediction error against the exact algorithm; rel_rms_dev: softmax vs linear layer; "
                      "rms_shift: prediction shift caused by one outlier example.")
ESSAY_CLAIMS = ("E6: the companion essay's testable claims, measured. CI: 95 % bootstrap over "
                "seeds and prompts; verdict rules in docs/essay.md.")
ESSAY_CURVES = ("E6: in-context MSE against k for the trained models and the baselines; "
                "dist_to_model: mean squared distance between the model's and the estimator's predictions.")
