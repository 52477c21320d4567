"""Hand-built frozen attention that runs algorithms from the prompt alone (E5; Theorems 3.1, 4.1/4.2).

* :mod:`.grid`: the read-out mechanism (a softmax over grid tokens that reads out a scalar
  ``u^T x`` or a function of it), its error bound, and the end margin inside which values
  are refused at a stated tolerance.
* :mod:`.interpreter`: the fixed two-layer module ``Attn_s o Attn_m`` (multi-head, then
  single-head softmax attention; every weight written down, nothing trained).
* :mod:`.programs`: programs (attention heads, the ``f(w^T x - y) x`` template, GD steps),
  their prompts, and the exact algorithms for comparison.
* :mod:`.studies`: the error studies, the library table and the multi-step experiment.

See docs/constructions.md.
"""

from algo_emu.constructions.grid import (
    Grid,
    aliasing_error,
    end_error_bound,
    end_margin,
    make_table,
    readout_bound,
    soft_readout,
    softmax_weights,
)
from algo_emu.constructions.interpreter import Capacity, Interpreter, Layout
from algo_emu.constructions.programs import (
    Loss,
    Program,
    Prompt,
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

__all__ = [
    "Capacity", "Grid", "Interpreter", "Layout", "Loss", "Program", "Prompt", "aliasing_error", "attention_head",
    "compile_prompt", "end_error_bound", "end_margin", "gd_multistep", "gd_step_emulated", "gd_step_exact", "head_program", "make_loss",
    "make_table", "readout_bound", "run", "soft_readout", "softmax_weights", "template_exact", "template_program",
]
