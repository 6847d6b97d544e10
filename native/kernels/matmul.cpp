// The GEMM driver: quantize x once, split N over the pool, and within each thread walk strips of
// up to 4 weight rows across all T tokens so a strip is fetched from memory once per call.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "util/threadpool.h"

namespace mb {
namespace kq {

namespace {
constexpr int kRowTile = 4;   // weight rows per strip (matches TileFn's nr <= 4)
constexpr int kTokTile = 4;   // tokens per tile call (TileFn's nt <= 4)
constexpr size_t kTokBlockBytes = 8 * 1024;  // activation bytes per token block (measured: 8 KB beat 24 and 96)
constexpr size_t kL2Budget = 1 << 20;        // weight bytes per thread assumed to stay in L2
constexpr int kParallelQuantRows = 16;  // below this, quantizing x on one thread is cheaper than a barrier
constexpr int kGemm8Group = 8;          // tokens per Gemm8 group
constexpr int kGemm8MinTokens = 4;      // a last group with fewer tokens goes to the tile kernels instead
}  // namespace

void matmul_with(const KernelTable& kt, const QMatrix& W, const float* x, float* y, int T, ThreadPool* pool,
                 MatmulScratch* scratch) {
  if (T <= 0 || W.N <= 0) return;
  const int slot = type_slot(W.type);
  if (slot < 0 || !kt.dot[slot])
    throw std::invalid_argument(std::string("kernels: matmul does not support weight type ") +
                                std::to_string((unsigned)W.type));
  const GgmlType vt = vec_dot_type(W.type);
  const int64_t K = W.K, N = W.N;
  const size_t wrb = ggml_row_bytes(W.type, K);  // weight row bytes
  const size_t xrb = ggml_row_bytes(vt, K);      // quantized activation row bytes
  const int nth = pool ? pool->size() : 1;

  // xq[T][xrb]: the activations in W's partner type, quantized once for the whole call, in the
  // caller's scratch when it gave one (grown, never shrunk, so steady state allocates nothing)
  std::vector<uint8_t> local, local_packed;
  std::vector<uint8_t>& buf = scratch ? scratch->xq : local;
  const uint8_t* xq;
  if (vt == GgmlType::F32) {
    xq = reinterpret_cast<const uint8_t*>(x);
  } else {
    if (buf.size() < (size_t)T * xrb) buf.resize((size_t)T * xrb);
    uint8_t* xb = buf.data();
    if (nth > 1 && T >= kParallelQuantRows) {
      pool->run([&](int ith, int n) {
        for (int t = ith; t < T; t += n) quantize_row_for(kt, W.type, x + (size_t)t * K, xb + (size_t)t * xrb, K);
      });
    } else {
      for (int t = 0; t < T; t++) quantize_row_for(kt, W.type, x + (size_t)t * K, xb + (size_t)t * xrb, K);
    }
    xq = xb;
  }

  // Tokens [0, tg) go through the table's 8-token GEMM where it has one, in groups packed once
  // per call; the rest (all of them without one) through the tile kernels. Same bits either way.
  const Gemm8& g8 = kt.gemm8[slot];
  const int ng = g8.run ? T / kGemm8Group + (T % kGemm8Group >= kGemm8MinTokens ? 1 : 0) : 0;
  const int tg = std::min(T, ng * kGemm8Group);
  const size_t gpb = ng ? g8.packed_bytes(K) : 0;  // packed bytes per group
  const uint8_t* packed = nullptr;
  if (ng) {
    std::vector<uint8_t>& pbuf = scratch ? scratch->packed : local_packed;
    if (pbuf.size() < (size_t)ng * gpb) pbuf.resize((size_t)ng * gpb);
    uint8_t* pb = pbuf.data();
    auto pack = [&](int g) {
      const int t0 = g * kGemm8Group;
      g8.pack(xq + (size_t)t0 * xrb, xrb, std::min(kGemm8Group, T - t0), K, pb + (size_t)g * gpb);
    };
    if (nth > 1 && T >= kParallelQuantRows) {
      pool->run([&](int ith, int n) {
        for (int g = ith; g < ng; g += n) pack(g);
      });
    } else {
      for (int g = 0; g < ng; g++) pack(g);
    }
    packed = pb;
  }

  const DotFn dot = kt.dot[slot];
  // With T = 1 the tile kernels run 4 rows x 1 token: four independent accumulator chains, no
  // token loop, and results identical to the row dot.
  const TileFn tile = kt.tile[slot];
  auto work = [&](int ith, int n) {
    // contiguous, strip-aligned share of N per thread
    const int64_t strips = (N + kRowTile - 1) / kRowTile;
    const int64_t per = (strips + n - 1) / n;
    const int64_t r0 = std::min(N, ith * per * kRowTile);
    const int64_t r1 = std::min(N, (ith + 1) * per * kRowTile);
    // If this thread's rows fit in L2, every token block (or group) passes over all of them and
    // they come from L2 after the first; if not (the output matrix), each strip meets all tokens
    // in turn, so the weights come from memory once per call.
    const bool rows_fit_l2 = (size_t)(r1 - r0) * wrb <= kL2Budget;
    auto group = [&](int g, int64_t r) {
      const int t0 = g * kGemm8Group;
      g8.run(K, W.data + (size_t)r * wrb, wrb, (int)std::min<int64_t>(kRowTile, r1 - r), packed + (size_t)g * gpb,
             std::min(kGemm8Group, T - t0), y + (size_t)t0 * N + r, (size_t)N);
    };
    if (rows_fit_l2) {
      for (int g = 0; g < ng; g++)
        for (int64_t r = r0; r < r1; r += kRowTile) group(g, r);
    } else {
      for (int64_t r = r0; r < r1; r += kRowTile)
        for (int g = 0; g < ng; g++) group(g, r);
    }
    if (tg == T) return;
    if (!tile) {
      // types without a tiled kernel: row dots; each row stays in L1 across the T tokens
      for (int64_t r = r0; r < r1; r++) {
        const uint8_t* wr = W.data + (size_t)r * wrb;
        for (int t = tg; t < T; t++) y[(size_t)t * N + r] = dot(K, wr, xq + (size_t)t * xrb);
      }
      return;
    }
    // Token blocks sized to stay in L1 while every strip of this thread's rows passes over them.
    const int tb = rows_fit_l2 ? std::max(kTokTile, (int)(kTokBlockBytes / xrb) / kTokTile * kTokTile) : T;
    for (int t0 = tg; t0 < T; t0 += tb) {
      const int t1 = std::min(T, t0 + tb);
      for (int64_t r = r0; r < r1; r += kRowTile) {
        const int nr = (int)std::min<int64_t>(kRowTile, r1 - r);
        const uint8_t* wr = W.data + (size_t)r * wrb;
        for (int t = t0; t < t1; t += kTokTile) {
          const int nt = std::min(kTokTile, t1 - t);
          tile(K, wr, wrb, nr, xq + (size_t)t * xrb, xrb, nt, y + (size_t)t * N + r, (size_t)N);
        }
      }
    }
  };
  if (nth > 1) pool->run(work);
  else work(0, 1);
}

}  // namespace kq
}  // namespace mb
