// Register pressure under a tight launch bound: forces spills to local memory, plus a static
// shared-memory buffer, so the resource-usage parsers see registers, shared memory, stack and spills.
#define N 96
extern "C" __global__ void __launch_bounds__(1024, 2) spill_heavy(void* scratch, unsigned long long scratch_bytes) {
    __shared__ float staging[1024];
    float v[N];
    float* data = static_cast<float*>(scratch);
    unsigned long long n = scratch_bytes / sizeof(float);
    #pragma unroll
    for (int i = 0; i < N; ++i) v[i] = data[(threadIdx.x * N + i) % n];
    staging[threadIdx.x] = v[threadIdx.x % N];
    __syncthreads();
    #pragma unroll
    for (int r = 0; r < 8; ++r) {
        #pragma unroll
        for (int i = 0; i < N; ++i) v[i] = v[i] * v[(i + r + 1) % N] + staging[(threadIdx.x + i) % 1024];
    }
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < N; ++i) s += v[i];
    data[(blockIdx.x * blockDim.x + threadIdx.x) % n] = s;
}
