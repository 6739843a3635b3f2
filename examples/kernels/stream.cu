// DRAM-streaming kernel: reads and writes the whole scratch buffer once per launch.
// Canary kernel convention: (void* scratch, unsigned long long scratch_bytes).
extern "C" __global__ void stream_triad(void* scratch, unsigned long long scratch_bytes) {
    float4* data = static_cast<float4*>(scratch);
    unsigned long long n = scratch_bytes / sizeof(float4);
    unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float4 v = data[i];
        v.x = v.x * 1.0001f + 1.0f;
        v.y = v.y * 1.0001f + 1.0f;
        v.z = v.z * 1.0001f + 1.0f;
        v.w = v.w * 1.0001f + 1.0f;
        data[i] = v;
    }
}
