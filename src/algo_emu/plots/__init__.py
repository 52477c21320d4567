"""The one plotting style of the project.

Figures are pure functions of tables (``results/tables/*``): each experiment's
plotting functions live in a submodule (``plots.heads``, ...) and all use
:func:`figure` and :func:`save_figure` from here, so every figure shares one
seaborn theme, one palette, and a provenance footer.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from algo_emu.io import atomic_path  # noqa: E402

PALETTE = "colorblind"
OURS_COLOR = sns.color_palette(PALETTE)[0]
PAPER_COLOR = sns.color_palette(PALETTE)[3]
FIT_COLOR = sns.color_palette(PALETTE)[2]


@contextlib.contextmanager
def figure(ncols: int = 1, nrows: int = 1, width: float = 4.8, height: float = 3.4, **kwargs) -> Iterator:
    """Create a figure in the project style; closes it on exit."""
    with sns.axes_style("whitegrid"), sns.plotting_context("paper", font_scale=1.15):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs)
        try:
            yield fig, (axes[0, 0] if axes.size == 1 else axes)
        finally:
            plt.close(fig)


def save_figure(fig, stem: str | Path, footer: str | None = None, formats=("pdf", "png")) -> list[Path]:
    """Save ``fig`` as ``stem.pdf`` and ``stem.png`` atomically, with an optional provenance footer."""
    stem = Path(stem)
    if footer:
        fig.text(0.01, 0.005, footer, fontsize=6.5, color="0.35", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.05 if footer else 0, 1, 1))
    out = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        with atomic_path(path) as tmp:
            # no creation date in the PDF: the same figure gives the same bytes (committed sets list them)
            fig.savefig(tmp, format=fmt, dpi=200 if fmt == "png" else None,
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
        out.append(path)
    return out
