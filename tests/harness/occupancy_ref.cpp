// Reference oracle for canary.occupancy: the real cuda_occupancy.h, driven from stdin.
//
// Input, one configuration per line (whitespace separated integers):
//   computeMajor computeMinor maxThreadsPerBlock maxThreadsPerMultiprocessor regsPerBlock
//   regsPerMultiprocessor warpSize sharedMemPerBlock sharedMemPerMultiprocessor numSms
//   sharedMemPerBlockOptin reservedSharedMemPerBlock
//   numRegs blockSize sharedSizeBytes dynamicSmemSize maxDynamicSharedSizeBytes carveoutConfig
//   numBlockBarriers
// Output, one line per input line:
//   status activeBlocks limitingFactors blockLimitRegs blockLimitSharedMem blockLimitWarps
//   blockLimitBlocks blockLimitBarriers allocatedRegistersPerBlock allocatedSharedMemPerBlock
// The function is described as cudaFuncGetAttributes + cudaFuncSetAttribute leave it: OPTIN,
// partitioned global caching off, no virtual resources, cacheConfig PREFER_NONE.
#include <cstdio>
#include <cuda_occupancy.h>

int main() {
    long long v[19];
    for (;;) {
        for (int i = 0; i < 19; ++i) {
            if (std::scanf("%lld", &v[i]) != 1) {
                return 0;
            }
        }
        cudaOccDeviceProp prop;
        prop.computeMajor = (int)v[0];
        prop.computeMinor = (int)v[1];
        prop.maxThreadsPerBlock = (int)v[2];
        prop.maxThreadsPerMultiprocessor = (int)v[3];
        prop.regsPerBlock = (int)v[4];
        prop.regsPerMultiprocessor = (int)v[5];
        prop.warpSize = (int)v[6];
        prop.sharedMemPerBlock = (size_t)v[7];
        prop.sharedMemPerMultiprocessor = (size_t)v[8];
        prop.numSms = (int)v[9];
        prop.sharedMemPerBlockOptin = (size_t)v[10];
        prop.reservedSharedMemPerBlock = (size_t)v[11];

        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = (int)v[2];
        attr.numRegs = (int)v[12];
        attr.sharedSizeBytes = (size_t)v[14];
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        attr.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
        attr.maxDynamicSharedSizeBytes = (size_t)v[16];
        attr.numBlockBarriers = (int)v[18];
        attr.virtualResourceCount = 0;

        cudaOccDeviceState state;
        state.cacheConfig = CACHE_PREFER_NONE;
        state.carveoutConfig = (int)v[17];

        cudaOccResult result = {};
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(
            &result, &prop, &attr, &state, (int)v[13], (size_t)v[15]);
        std::printf("%d %d %u %d %d %d %d %d %d %zu\n", (int)status,
                    result.activeBlocksPerMultiprocessor, result.limitingFactors,
                    result.blockLimitRegs, result.blockLimitSharedMem, result.blockLimitWarps,
                    result.blockLimitBlocks, result.blockLimitBarriers,
                    result.allocatedRegistersPerBlock, result.allocatedSharedMemPerBlock);
    }
}
