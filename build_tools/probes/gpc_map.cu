// Where the hardware places the CTAs of a cluster launch: %smid per block, and the SMs' GPCs (SMs that
// share a 16-CTA cluster share a GPC). Build: nvcc -arch=sm_90a -o gpc_map gpc_map.cu (docs/PERF.md, sessions 40, 41)
#include <cstdio>
#include <vector>
#include <map>
#include <set>
#include <algorithm>
#include <numeric>
#include <cuda_runtime.h>

__global__ void probe(int* out, long long spin) {
  unsigned smid, cid, rank;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) { out[blockIdx.x * 3] = smid; out[blockIdx.x * 3 + 1] = cid; out[blockIdx.x * 3 + 2] = rank; }
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}
}

static std::vector<int> run(int grid, int cluster, int smem) {
  int* d; cudaMalloc(&d, grid * 3 * sizeof(int)); cudaMemset(d, 0xff, grid * 3 * sizeof(int));
  cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(grid); cfg.blockDim = dim3(128); cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeClusterDimension;
  a[0].val.clusterDim.x = cluster; a[0].val.clusterDim.y = 1; a[0].val.clusterDim.z = 1;
  cfg.attrs = a; cfg.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&cfg, probe, d, 2000000LL);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<int> h(grid * 3, -1);
  if (e != cudaSuccess) { printf("launch grid %d cluster %d: %s\n", grid, cluster, cudaGetErrorString(e)); cudaGetLastError(); }
  else cudaMemcpy(h.data(), d, grid * 3 * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  return h;
}

int find(std::vector<int>& p, int x) { return p[x] == x ? x : p[x] = find(p, p[x]); }

int main() {
  int smem = 200 * 1024;  // one CTA per SM
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::vector<int> parent(132); std::iota(parent.begin(), parent.end(), 0);
  for (int cl : {16, 8}) for (int rep = 0; rep < 6; ++rep) {
    for (int grid = cl; grid <= 132; grid += cl * ((rep % 3) + 1)) {
      auto h = run(grid, cl, smem);
      for (int b = 0; b < grid; ++b) if (h[b * 3] >= 0 && h[(b - b % cl) * 3] >= 0) {
        int x = find(parent, h[b * 3]), y = find(parent, h[(b - b % cl) * 3]); parent[x] = y; }
    }
  }
  std::map<int, std::vector<int>> gpcs; for (int s = 0; s < 132; ++s) gpcs[find(parent, s)].push_back(s);
  std::vector<int> gpc_of(132, -1); int gi = 0;
  for (auto& kv : gpcs) { printf("GPC %d (%zu SMs):", gi, kv.second.size()); for (int s : kv.second) { printf(" %d", s); gpc_of[s] = gi; } printf("\n"); ++gi; }
  struct Case { int grid, cluster; };
  for (Case c : {Case{132, 1}, Case{130, 2}, Case{120, 4}, Case{120, 8}}) {
    for (int rep = 0; rep < 2; ++rep) {
      auto h = run(c.grid, c.cluster, smem);
      printf("grid %d cluster %d rep %d, GPC of each cluster in cluster-id order:", c.grid, c.cluster, rep);
      for (int b = 0; b < c.grid; b += c.cluster) printf(" %d", h[b * 3] >= 0 ? gpc_of[h[b * 3]] : -1);
      printf("\n  clusterid of block b*cluster:");
      for (int b = 0; b < c.grid && b < 40 * c.cluster; b += c.cluster) printf(" %d", h[b * 3 + 1]);
      printf("\n");
    }
  }
  return 0;
}
