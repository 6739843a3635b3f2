// Persistent, shared-memory-heavy kernel at low utilisation: one block per SM holds a large
// dynamic shared-memory allocation and mostly sleeps until the duration in scratch[0] (ns) is up.
// Launched with dynamic shared memory near the per-SM maximum, it leaves no room for a candidate.
extern "C" __global__ void persistent_smem_sleeper(void* scratch, unsigned long long scratch_bytes) {
    extern __shared__ float tile[];
    const unsigned long long* params = static_cast<const unsigned long long*>(scratch);
    unsigned long long duration_ns = scratch_bytes >= 8 ? params[0] : 0;
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    tile[threadIdx.x] = threadIdx.x;
    unsigned long long now = start;
    while (now - start < duration_ns) {
        __nanosleep(100000);
        tile[threadIdx.x] += 1.0f;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    if (threadIdx.x == 0 && scratch_bytes >= 16 + sizeof(float)) {
        reinterpret_cast<float*>(static_cast<char*>(scratch) + 16)[blockIdx.x % 4] = tile[0];
    }
}
