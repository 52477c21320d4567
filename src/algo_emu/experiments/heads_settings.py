"""E1's settings and headline quantities, importable without torch (the workflow parses this).

Two protocols (``heads.protocols``), each with its own headline quantity:

* ``published``: one data set and target head for all seeds, the code's softmax
  axis (``reference_code``), the mean of per-batch means; heads sweep and
  prompt-length sweep;
* ``independent``: a data set and head per seed, ``heads.target``, the exact
  mean; heads sweep.
"""

from __future__ import annotations

PROTOCOLS = ("published", "independent")
METRICS = {"exact": "mse", "batchmean": "mse_batchmean"}  # metric name -> column of the runs table
METRIC_LABELS = {"exact": "exact mean", "batchmean": "mean of per-batch means"}


def headline(protocol: str, params: dict) -> tuple[str, str]:
    """(target definition, metric) a protocol reports as its headline."""
    if protocol == "published":
        return "reference_code", "batchmean"  # the code's softmax axis, mean of per-batch means
    if protocol == "independent":
        return params["target"], "exact"
    raise ValueError(f"heads.protocols: unknown protocol {protocol!r} (expected one of {PROTOCOLS})")


def p_sweep_protocol(params: dict) -> str:
    """The protocol the prompt-length sweep runs under: published when it is configured."""
    return "published" if "published" in params["protocols"] else "independent"


def settings(params: dict) -> list[tuple[str, int, int]]:
    """All (protocol, H, p) settings, deduplicated (H=1, p=60 belongs to both sweeps).

    published: the heads sweep and the prompt-length sweep; independent: the heads
    sweep (and the prompt-length sweep only when published is not configured)."""
    out = []
    for protocol in params["protocols"]:
        out += [(protocol, H, params["p_heads_sweep"]) for H in params["heads_sweep"]]
        if protocol == p_sweep_protocol(params):
            out += [(protocol, params["heads_p_sweep"], p) for p in params["p_sweep"]]
    return list(dict.fromkeys(out))


def setting_name(H: int, p: int) -> str:
    return f"H{H}_p{p}"


# --------------------------------------------------------------------------- variants (ours, never paper-comparable)

#: Keys a variant (``heads.variants``) may override; every other training key is the section's.
VARIANT_OVERRIDES = ("epochs", "lr", "lr_schedule", "eval_every")


def variants(params: dict) -> list[dict]:
    """The configured variants (``heads.variants``), in config order."""
    return list(params.get("variants") or [])


def variant(params: dict, name: str) -> dict:
    for v in variants(params):
        if v["name"] == name:
            return v
    raise KeyError(f"heads.variants: no variant named {name!r} (configured: {[v['name'] for v in variants(params)]})")


def variant_protocol(v: dict) -> str:
    return v.get("protocol", "published")


def variant_train_params(params: dict, name: str) -> dict:
    """The ``params`` of variant ``name``'s training job: the keys the heads train step reads in the variant's
    protocol, the variant's overrides in place of the section's values. A key a variant overrides is not read from
    the section, so editing that section key leaves the variant's params (its rerun trigger) unchanged."""
    v = variant(params, name)
    return overridden_train_params(params, v, variant_protocol(v))


def overridden_train_params(params: dict, overrides: dict, protocol: str) -> dict:
    """The heads train step's ``params`` in ``protocol`` with the :data:`VARIANT_OVERRIDES` keys that
    ``overrides`` holds in place of the section's (the one way a run of ours changes the training budget)."""
    from algo_emu.specs import step_params

    merged = dict(params) | {k: overrides[k] for k in VARIANT_OVERRIDES if k in overrides}
    return step_params(merged, "heads", "train", protocol)


# --------------------------------------------------------------------------- convergence (ours, never paper-comparable)

#: Budgets of the convergence check: the candidate's own epochs E (x1) and twice them (x2).
BUDGETS = {"x1": 1, "x2": 2}


def candidates(params: dict) -> list[dict]:
    """``heads.convergence.candidates``, in order of preference."""
    return list((params.get("convergence") or {}).get("candidates") or [])


def candidate(params: dict, name: str) -> dict:
    for c in candidates(params):
        if c["name"] == name:
            return c
    raise KeyError(f"heads.convergence.candidates: no candidate named {name!r} "
                   f"(configured: {[c['name'] for c in candidates(params)]})")


def candidate_train_params(params: dict, name: str, budget: str = "x1", protocol: str = "published") -> dict:
    """The train step's ``params`` of candidate ``name`` at ``budget`` (x1: its epochs E; x2: 2E, the same lr and
    schedule, a cosine stretched over 2E) under ``protocol``. Only the candidate's own keys change its runs' params:
    editing heads.epochs, heads.lr or heads.lr_schedule reruns none of them."""
    if budget not in BUDGETS:
        raise KeyError(f"heads.convergence: budget {budget!r} is not one of {sorted(BUDGETS)}")
    c = candidate(params, name)
    over = {"epochs": c["epochs"] * BUDGETS[budget], "lr": c["lr"],
            "lr_schedule": c["lr_schedule"]}
    return overridden_train_params(params, over, protocol)


def run_label(kind: str, name: str, budget: str | None = None) -> str:
    """The ``variant`` label of a convergence (``kind`` = convergence) or converged run's records: ours, never
    paper-comparable, refused by the sweep's tables."""
    return f"{kind}-{name}" + (f"-{budget}" if budget else "")
