"""Workload profiles built from evidence rather than typed by hand.

- :mod:`canary.envelope.binary` — kernels from a CUDA binary (cuobjdump), version = the file's digest;
- :mod:`canary.envelope.record` — memory, duty cycle and phases sampled through NVML during a run.
"""
