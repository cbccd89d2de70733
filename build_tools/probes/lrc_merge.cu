// Which SMs' identical L2 reads does the L2 request coalescer merge? 132 CTAs (one per SM), each streams
// 16 KB blocks with cp.async.bulk (the TMA engine) from a region chosen by a key of its %smid; CTAs with
// the same key read the same addresses at about the same time. Run under ncu for the lrc__ counters:
//   nvcc -arch=sm_90a -O2 -o lrc_merge lrc_merge.cu
//   ncu --clock-control none [--cache-control none] --launch-skip 2 --launch-count 1 --metrics \
//     lrc__request_sectors_op_read_coalescable.sum,lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum \
//     ./lrc_merge MODE [DEPTH=2] [PRIVATE=0]
// MODE: who shares a region (see the switch below); DEPTH: blocks in flight per CTA; PRIVATE=1: half of
// each block is the CTA's own (as a GEMM CTA's other operand). Results: docs/PERF.md, session 41.
// The GPC table is this H200's (gpc_map.cu prints it; floor-swept dies differ).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// H200 GPC map of SMs 0-119 (gpc_map.cu: SMs sharing a 16-CTA cluster); SMs 120-131 never joined one.
__constant__ int GPC[120] = {
 0,0,1,1,2,2,3,3,4,4,5,5,6,6,7,7, 0,0,1,1,2,2,3,3,4,4,5,5,6,6,7,7, 0,0,1,1,2,2,3,3,4,4,5,5,6,6,7,7,
 0,0,1,1,2,2,3,3,4,4,5,5,6,6,7,7, 1,1,2,2,3,3,4,4,5,5,6,6,7,7, 1,1,2,2,3,3,4,4,5,5,6,6,7,7,
 1,1,2,2,3,3,4,4,5,5,6,6,7,7, 1,1,2,2,3,3,4,4,5,5,6,6,7,7};
// TPC rank within its GPC: SMs 0-63 in blocks of 16 (rank 0-3), 64-119 in blocks of 14 (rank 4-7)
__device__ int rank_of(int s) { return s < 64 ? s / 16 : 4 + (s - 64) / 14; }

constexpr int BLOCK = 16384, STEPS = 48;

__global__ void stream(const char* buf, int mode, long long* sink, int depth, int priv) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) unsigned long long bar[16];
  unsigned smid; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  int key;
  switch (mode) {
    case 0: key = smid; break;                                          // nobody shares
    case 1: key = smid < 120 ? rank_of(smid) : 1000 + smid; break;      // same TPC rank across GPCs
    case 2: key = smid < 120 ? GPC[smid] : 1000 + smid; break;          // same GPC
    case 3: key = smid < 120 ? (smid * 2654435761u >> 7) % 8 : 1000 + smid; break;  // hashed groups of ~15
    case 4: key = smid / 2; break;                                      // the two SMs of a TPC
    case 5: key = smid < 120 ? (GPC[smid] * 8 + rank_of(smid)) : 1000 + smid; break;  // same TPC (GPC, rank)
    default: key = 0;                                                   // everybody the same
  }
  const char* base = buf + (size_t)(key % 1200) * STEPS * BLOCK;
  unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar[0]);
  if (threadIdx.x == 0) {
    for (int d = 0; d < depth; ++d) asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(sbar + 8 * d));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned sdst = (unsigned)__cvta_generic_to_shared(smem);
    const char* mine = buf + (size_t)(1200 + blockIdx.x) * STEPS * BLOCK;  // a private stream per CTA
    int bytes = priv ? 2 * (BLOCK / 2) : BLOCK;  // with priv: half shared, half private per stage
    for (int i = 0; i < STEPS; ++i) {
      int s = i % depth;
      unsigned b = sbar + 8 * s;
      if (i >= depth) {  // wait for the block issued depth steps ago into this buffer
        unsigned phase = ((i - depth) / depth) & 1;
        asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W; }" :: "r"(b), "r"(phase));
      }
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(b), "r"(bytes));
      if (priv) {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sdst + s * BLOCK), "l"(base + (size_t)i * BLOCK), "r"(BLOCK / 2), "r"(b) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sdst + s * BLOCK + BLOCK / 2), "l"(mine + (size_t)i * BLOCK), "r"(BLOCK / 2), "r"(b) : "memory");
      } else {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sdst + s * BLOCK), "l"(base + (size_t)i * BLOCK), "r"(BLOCK), "r"(b) : "memory");
      }
    }
    for (int i = STEPS - depth; i < STEPS; ++i) {
      unsigned phase = (i / depth) & 1;
      asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1; @!p bra W; }" :: "r"(sbar + 8 * (i % depth)), "r"(phase));
    }
    sink[blockIdx.x] = smem[5] + smem[BLOCK + 7];
  }
}

int main(int argc, char** argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  int depth = argc > 2 ? atoi(argv[2]) : 2;
  int priv = argc > 3 ? atoi(argv[3]) : 0;
  size_t bytes = (size_t)1400 * STEPS * BLOCK;  // covers keys up to 1000 + 131
  char* buf; cudaMalloc(&buf, bytes); cudaMemset(buf, 1, bytes);
  long long* sink; cudaMalloc(&sink, 132 * sizeof(long long));
  int smem = depth * BLOCK > 120 * 1024 ? depth * BLOCK : 120 * 1024;  // one CTA per SM
  cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int r = 0; r < 3; ++r) stream<<<132, 128, smem>>>(buf, mode, sink, depth, priv);
  cudaError_t e = cudaDeviceSynchronize();
  printf("mode %d: %s\n", mode, cudaGetErrorString(e));
  return 0;
}
