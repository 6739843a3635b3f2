// Compute-bound kernel: a long chain of FMAs on registers, one store per thread.
extern "C" __global__ void fma_chain(void* scratch, unsigned long long scratch_bytes) {
    float a = threadIdx.x * 0.001f, b = 1.0001f, c = 0.9999f, d = blockIdx.x * 0.5f;
    #pragma unroll 16
    for (int i = 0; i < 65536; ++i) {
        a = fmaf(a, b, c);
        d = fmaf(d, c, b);
        b = fmaf(b, a, d);
    }
    float* out = static_cast<float*>(scratch);
    unsigned long long slot = blockIdx.x * blockDim.x + threadIdx.x;
    if ((slot + 1) * sizeof(float) <= scratch_bytes) out[slot] = a + b + d;
}
