"""algo-emu: replication pipeline for "In-Context Algorithm Emulation in
Fixed-Weight Transformers" (Hu, Liu, Zhang, Liu; ICLR 2026, arXiv 2508.17550).

All logic lives in this package; the Snakemake workflow only calls it.
"""

__version__ = "0.1.0"
