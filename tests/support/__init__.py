"""What several test packages share: paths and CLI helpers, misbehaving doubles of the probe's
executor and monitor, loopback workload servers, a prober that gets killed, and recorded NVML/CUDA
library shapes. Import from here (``tests.support.<module>``); a test package's own helpers stay in
that package."""
