// Candidate with a 40 KiB static shared-memory tile: cannot become resident beside a kernel that
// holds almost all of an SM's shared memory.
#define TILE_FLOATS (40 * 1024 / 4)
extern "C" __global__ void __launch_bounds__(256) tiled_candidate(void* scratch, unsigned long long scratch_bytes) {
    __shared__ float tile[TILE_FLOATS];
    for (int i = threadIdx.x; i < TILE_FLOATS; i += blockDim.x) tile[i] = i * 0.5f;
    __syncthreads();
    float acc = 0.0f;
    for (int r = 0; r < 64; ++r)
        for (int i = threadIdx.x; i < TILE_FLOATS; i += blockDim.x) acc += tile[(i * 7 + r) % TILE_FLOATS];
    float* out = static_cast<float*>(scratch);
    unsigned long long slot = blockIdx.x * blockDim.x + threadIdx.x;
    if ((slot + 1) * sizeof(float) <= scratch_bytes) out[slot] = acc;
}
