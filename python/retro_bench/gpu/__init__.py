"""GPU measurement helpers: the lent machine's summary table and PyTorch SDPA baseline, the hardware values
of a device report, the recount of the offloaded rows (docs/cuda.md, docs/performance.md)."""
