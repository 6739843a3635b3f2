// Representative kernels for the example profiles in examples/profiles/.
// Their register and shared-memory numbers are what `nvcc -Xptxas -v` reports for them
// (see examples/README.md for the command and the table); each profile cites the kernel it uses.
#include <cuda_fp16.h>
#include <stdint.h>

// LLM decode: paged attention, one block per (sequence, head), K/V read page by page.
__global__ void paged_attention_decode(const half* __restrict__ q, const half* __restrict__ k_cache,
                                       const half* __restrict__ v_cache, const int* __restrict__ block_table,
                                       const int* __restrict__ seq_lens, half* __restrict__ out,
                                       int head_dim, int block_size, int max_blocks) {
  __shared__ float q_s[128];
  __shared__ float logits[512];
  __shared__ float red[32];
  int seq = blockIdx.y, head = blockIdx.x, tid = threadIdx.x;
  const half* qh = q + (seq * gridDim.x + head) * head_dim;
  if (tid < head_dim) q_s[tid] = __half2float(qh[tid]);
  __syncthreads();
  int len = seq_lens[seq];
  float m = -1e30f;
  for (int t = tid; t < len && t < 512; t += blockDim.x) {
    int page = block_table[seq * max_blocks + t / block_size];
    const half* kp = k_cache + ((size_t)page * block_size + t % block_size) * head_dim;
    float acc = 0.f;
#pragma unroll 8
    for (int d = 0; d < 128; ++d) acc += q_s[d] * __half2float(kp[d]);
    logits[t] = acc;
    m = fmaxf(m, acc);
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  if ((tid & 31) == 0) red[tid >> 5] = m;
  __syncthreads();
  m = red[0];
  for (int i = 1; i < blockDim.x / 32; ++i) m = fmaxf(m, red[i]);
  float s = 0.f;
  for (int t = tid; t < len && t < 512; t += blockDim.x) { logits[t] = __expf(logits[t] - m); s += logits[t]; }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  __syncthreads();
  if (tid < head_dim) {
    float acc = 0.f;
    for (int t = 0; t < len && t < 512; ++t) {
      int page = block_table[seq * max_blocks + t / block_size];
      acc += logits[t] * __half2float(v_cache[((size_t)page * block_size + t % block_size) * head_dim + tid]);
    }
    out[(seq * gridDim.x + head) * head_dim + tid] = __float2half(acc / s);
  }
}

// Tiled GEMM (prefill projections, conv as implicit GEMM): 128x128 tile, 32-deep K slices, 2 stages.
template <int BM, int BN, int BK>
__global__ void gemm_tile(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K) {
  __shared__ half As[2][BM][BK];
  __shared__ half Bs[2][BK][BN];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[8][8] = {};
  for (int k0 = 0, st = 0; k0 < K; k0 += BK, st ^= 1) {
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x)
      As[st][i / BK][i % BK] = A[(blockIdx.y * BM + i / BK) * K + k0 + i % BK];
    for (int i = threadIdx.x; i < BK * BN; i += blockDim.x)
      Bs[st][i / BN][i % BN] = B[(k0 + i / BN) * N + blockIdx.x * BN + i % BN];
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[8], b[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) { a[i] = __half2float(As[st][ty * 8 + i][kk]); b[i] = __half2float(Bs[st][kk][tx * 8 + i]); }
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      C[(blockIdx.y * BM + ty * 8 + i) * N + blockIdx.x * BN + tx * 8 + j] = acc[i][j];
}
template __global__ void gemm_tile<128, 128, 32>(const half*, const half*, float*, int, int, int);

// Fused attention tile (Stable Diffusion UNet attention): Q, K, V tiles in dynamic shared memory.
__global__ void attention_tile(const half* __restrict__ q, const half* __restrict__ k, const half* __restrict__ v,
                               half* __restrict__ o, int seq, int d) {
  extern __shared__ half smem[];
  half* ks = smem;
  half* vs = smem + 64 * 64;
  int row = blockIdx.x * 64 + threadIdx.x / 2;
  float acc[32] = {}, m = -1e30f, l = 0.f;
  for (int kb = 0; kb < seq; kb += 64) {
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) { ks[i] = k[kb * d + i]; vs[i] = v[kb * d + i]; }
    __syncthreads();
    for (int j = 0; j < 64; ++j) {
      float s = 0.f;
#pragma unroll
      for (int t = 0; t < 32; ++t) s += __half2float(q[row * d + (threadIdx.x & 1) * 32 + t]) * __half2float(ks[j * 64 + (threadIdx.x & 1) * 32 + t]);
      s += __shfl_xor_sync(0xffffffff, s, 1);
      float mn = fmaxf(m, s), p = __expf(s - mn), c = __expf(m - mn);
      l = l * c + p;
#pragma unroll
      for (int t = 0; t < 32; ++t) acc[t] = acc[t] * c + p * __half2float(vs[j * 64 + (threadIdx.x & 1) * 32 + t]);
      m = mn;
    }
    __syncthreads();
  }
#pragma unroll
  for (int t = 0; t < 32; ++t) o[row * d + (threadIdx.x & 1) * 32 + t] = __float2half(acc[t] / l);
}

// Persistent ring all-reduce step (NCCL-style): one block per channel, loops until told to stop.
__global__ void persistent_ring_allreduce(float* __restrict__ buf, const float* __restrict__ peer,
                                          volatile int* __restrict__ flags, volatile int* stop, int chunk) {
  __shared__ float stage[2048];
  int ch = blockIdx.x;
  int step = 0;
  while (!*stop) {
    while (flags[ch] == step && !*stop) {}
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
      stage[i & 2047] = peer[ch * chunk + i];
      buf[ch * chunk + i] += stage[i & 2047];
    }
    __syncthreads();
    if (threadIdx.x == 0) flags[ch] = ++step;
  }
}

// Persistent serving megakernel: one block per SM holds its working set in shared memory for good.
__global__ void persistent_decode_megakernel(const half* __restrict__ w, half* __restrict__ act,
                                             volatile int* __restrict__ work, volatile int* stop, int n) {
  extern __shared__ float tile[];
  while (!*stop) {
    int item = work[blockIdx.x];
    if (item < 0) continue;
    for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = __half2float(w[(size_t)item * n + i]);
    __syncthreads();
    float acc = 0.f;
    for (int i = 0; i < n; ++i) acc += tile[i] * __half2float(act[i]);
    act[n + threadIdx.x] = __float2half(acc);
    __syncthreads();
    if (threadIdx.x == 0) work[blockIdx.x] = -1;
  }
}

// DRAM-streaming ETL / transcode: grid-stride copy with a light transform.
__global__ void stream_transform(const uint4* __restrict__ in, uint4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = in[i];
    v.x ^= 0x5bd1e995u; v.y += v.x; v.z ^= v.y; v.w += v.z;
    out[i] = v;
  }
}

// Embedding-bag lookup (recommender, embedding service): sum rows of a table per bag.
__global__ void embedding_bag_sum(const float* __restrict__ table, const int64_t* __restrict__ idx,
                                  const int64_t* __restrict__ offsets, float* __restrict__ out, int dim) {
  int bag = blockIdx.x;
  int64_t a = offsets[bag], b = offsets[bag + 1];
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float s = 0.f;
    for (int64_t i = a; i < b; ++i) s += table[idx[i] * dim + d];
    out[(size_t)bag * dim + d] = s;
  }
}

// Layer norm (every transformer): one block per row, warp-shuffle reductions.
__global__ void layer_norm(const half* __restrict__ x, const half* __restrict__ g, half* __restrict__ y, int n) {
  __shared__ float red[2][32];
  const half* r = x + (size_t)blockIdx.x * n;
  float s = 0.f, ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) { float v = __half2float(r[i]); s += v; ss += v * v; }
  for (int o = 16; o > 0; o >>= 1) { s += __shfl_xor_sync(0xffffffff, s, o); ss += __shfl_xor_sync(0xffffffff, ss, o); }
  if ((threadIdx.x & 31) == 0) { red[0][threadIdx.x >> 5] = s; red[1][threadIdx.x >> 5] = ss; }
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < blockDim.x / 32 ? red[0][threadIdx.x] : 0.f;
    ss = threadIdx.x < blockDim.x / 32 ? red[1][threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) { s += __shfl_xor_sync(0xffffffff, s, o); ss += __shfl_xor_sync(0xffffffff, ss, o); }
    if (threadIdx.x == 0) { red[0][0] = s / n; red[1][0] = rsqrtf(ss / n - (s / n) * (s / n) + 1e-5f); }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    y[(size_t)blockIdx.x * n + i] = __float2half((__half2float(r[i]) - red[0][0]) * red[1][0] * __half2float(g[i]));
}
