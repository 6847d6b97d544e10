// The GEMM driver: quantize x once, hand out the 8-token GEMM's work in chunks to whichever
// thread is free, and give the tile kernels' tokens a contiguous share of N per thread, within
// which strips of up to 4 weight rows walk all their tokens so a strip is fetched from memory
// once per call.
#include <algorithm>
#include <atomic>
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
constexpr int kGemm4Group = 4;          // tokens per group of the table's gemm4
// gemm4 from 2 tokens to one less than this; above, Gemm16 (bench_kernels --cold, 2 threads,
// Qwen2.5-Coder-0.5B's Q5_0 gate/up and Q8_0 output: groups of 4 faster at 128 tokens by 5%,
// slower at 256 by 16%; at 16 tokens 1.8x faster)
constexpr int kGemm4Below = 160;
// Gemm8 chunks: about this many per thread (fewer leave a thread idle at the end when the other
// was preempted), of at most this many rows (more gain nothing: ~10 us of work at K = 576)
constexpr int kChunksPerThread = 16;
constexpr int64_t kMaxChunkRows = 64;
constexpr size_t kGemm8StepBytes = 64 * 1024;  // packed bytes per Gemm8 step (measured: 64 KB beat 48 at K = 1536)
}  // namespace
// From this many tokens a Gemm16 kernel (unpacking each block of 16 rows once) beats Gemm8 (and
// from one more, where a table's gemm4 entry takes 16 tokens: the K-quants' groups).
constexpr int kGemm16MinTokens = 16;

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

  // Tokens [0, tg) go through the table's 8-token GEMM where it has one, in groups packed once
  // per call; the rest (all of them without one) through the tile kernels. Same bits either way.
  // From 2 to kGemm4Below - 1 tokens, groups of 4 where the table has them: their lanes all work
  // from 4 tokens on, and they read a strip of weights once for up to 16 tokens. The K-quants'
  // entry says its own group size and token counts (one group of up to 16 tokens, from where it
  // beats the one-row tiles; Gemm16 after it: avx512/kquant_group.cpp).
  const Gemm8& g4 = kt.gemm4[slot];
  const bool use4 = g4.run && T >= (g4.from ? g4.from : 2) && T < (g4.below ? g4.below : kGemm4Below);
  const Gemm16& g16 = kt.gemm16[slot];
  const bool use16 = g16.run && T >= kGemm16MinTokens && !use4;
  const Gemm8& g8 = use4 ? g4 : kt.gemm8[slot];
  const int group = use4 ? (g4.group ? g4.group : kGemm4Group) : kGemm8Group;  // tokens per packed group
  const int ng = g8.run && !use16 ? T / group + (T % group >= g8.min_tokens ? 1 : 0) : 0;
  const int tg = std::min(T, ng * group);
  const size_t gpb = ng ? g8.packed_bytes(K) : 0;  // packed bytes per group

  // xq[T][xrb]: the activations in W's partner type, quantized once for the whole call, and
  // packed[ng][gpb] the groups, in the caller's scratch when it gave one (grown, never shrunk, so
  // steady state allocates nothing). Quantizing and packing share one pass: a group is packed by
  // the thread that just quantized its tokens.
  std::vector<uint8_t> local, local_packed;
  std::vector<uint8_t>& buf = scratch ? scratch->xq : local;
  uint8_t* pb = nullptr;
  if (ng) {
    std::vector<uint8_t>& pbuf = scratch ? scratch->packed : local_packed;
    if (pbuf.size() < (size_t)ng * gpb) pbuf.resize((size_t)ng * gpb);
    pb = pbuf.data();
  }
  // aux[T][auxb]: what a Gemm16 kernel derives from each activation row, once per call (in the
  // room gemm8's packing would take, unused then)
  const size_t auxb = use16 && g16.prepare ? g16.aux_bytes(K) : 0;
  uint8_t* aux = nullptr;
  if (auxb) {
    std::vector<uint8_t>& abuf = scratch ? scratch->packed : local_packed;
    if (abuf.size() < (size_t)T * auxb) abuf.resize((size_t)T * auxb);
    aux = abuf.data();
  }
  const uint8_t* xq;
  if (vt == GgmlType::F32) {
    xq = reinterpret_cast<const uint8_t*>(x);
  } else {
    if (buf.size() < (size_t)T * xrb) buf.resize((size_t)T * xrb);
    xq = buf.data();
  }
  if (vt != GgmlType::F32 || ng || aux) {
    uint8_t* xb = buf.data();
    // unit u < ng: group u's tokens, then its pack; u >= ng: token tg + (u - ng) alone
    const int units = ng + (T - tg);
    auto prepare = [&](int u) {
      const int t0 = u < ng ? u * group : tg + (u - ng);
      const int nt = u < ng ? std::min(group, T - t0) : 1;
      if (vt != GgmlType::F32)
        for (int t = t0; t < t0 + nt; t++) quantize_row_for(kt, W.type, x + (size_t)t * K, xb + (size_t)t * xrb, K);
      if (aux)
        for (int t = t0; t < t0 + nt; t++) g16.prepare(xb + (size_t)t * xrb, K, aux + (size_t)t * auxb);
      if (u < ng) g8.pack(xq + (size_t)t0 * xrb, xrb, nt, K, pb + (size_t)u * gpb);
    };
    if (nth > 1 && T >= kParallelQuantRows) {
      std::atomic<int> next{0};
      pool->run([&](int, int) {
        for (int u; (u = next.fetch_add(1, std::memory_order_relaxed)) < units;) prepare(u);
      });
    } else {
      for (int u = 0; u < units; u++) prepare(u);
    }
  }
  const uint8_t* packed = pb;

  if (use16) {
    // Blocks of 16 rows go to whichever thread is free; each unpacks its block once into its own
    // room and runs every token over it.
    const size_t ub = g16.unpacked_bytes(K) + 64;  // + room to align to 64 bytes
    std::vector<uint8_t> local_unpacked;
    std::vector<uint8_t>& ubuf = scratch ? scratch->unpacked : local_unpacked;
    if (ubuf.size() < (size_t)nth * ub) ubuf.resize((size_t)nth * ub);
    const int64_t nblocks = (N + kGemm16Rows - 1) / kGemm16Rows;
    std::atomic<int64_t> next_block{0};
    auto work16 = [&](int ith, int) {
      uint8_t* u = ubuf.data() + (size_t)ith * ub;
      u += (64 - ((uintptr_t)u & 63)) & 63;
      for (int64_t b; (b = next_block.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
        const int64_t r = b * kGemm16Rows;
        const int nr = (int)std::min<int64_t>(kGemm16Rows, N - r);
        g16.unpack(K, W.data + (size_t)r * wrb, wrb, nr, u);
        g16.run(K, u, nr, xq, xrb, aux, auxb, T, y + r, (size_t)N);
      }
    };
    if (nth > 1) pool->run(work16);
    else work16(0, 1);
    return;
  }

  // The groups go out in chunks of (group step, block of rows) to whichever thread is free
  // (a thread that the OS preempts on a busy machine delays a chunk, not a fixed half of the
  // call). A step is as many groups as run_n takes and kGemm8StepBytes holds, since a weight block
  // is unpacked once per step. If the matrix fits in a thread's L2, chunks go step by step, so the
  // packed step stays in L1 while the rows pass over it; if not (the output matrix), block by
  // block, so each block of weights is fetched from memory once.
  const int gstep =
      g8.run_n ? (int)std::max<size_t>(1, std::min<size_t>(kGemm8MaxGroups, kGemm8StepBytes / std::max<size_t>(gpb, 1)))
               : 1;
  const int nsteps = (ng + gstep - 1) / gstep;
  const bool fits_l2 = (size_t)N * wrb <= kL2Budget;
  const int64_t rb = std::max<int64_t>(
      kRowTile, std::min<int64_t>(kMaxChunkRows, N * nsteps / ((int64_t)nth * kChunksPerThread)) / kRowTile * kRowTile);
  const int64_t nrb = (N + rb - 1) / rb;
  const int64_t nchunks = (int64_t)nsteps * nrb;
  std::atomic<int64_t> next_chunk{0};
  auto gemm_chunk = [&](int64_t c) {
    const int s = (int)(fits_l2 ? c / nrb : c % nsteps);
    const int64_t ra = (fits_l2 ? c % nrb : c / nsteps) * rb, rz = std::min(N, ra + rb);
    const int g = s * gstep, n = std::min(gstep, ng - g), t0 = g * group;
    const int nt_last = std::min(group, T - (g + n - 1) * group);
    for (int64_t r = ra; r < rz; r += kRowTile) {
      const int nr = (int)std::min<int64_t>(kRowTile, rz - r);
      if (g8.run_n)
        g8.run_n(K, W.data + (size_t)r * wrb, wrb, nr, packed + (size_t)g * gpb, gpb, n, nt_last,
                 y + (size_t)t0 * N + r, (size_t)N);
      else
        g8.run(K, W.data + (size_t)r * wrb, wrb, nr, packed + (size_t)g * gpb, nt_last, y + (size_t)t0 * N + r,
               (size_t)N);
    }
  };

  const DotFn dot = kt.dot[slot];
  // With T = 1 the tile kernels run 4 rows x 1 token: four independent accumulator chains, no
  // token loop, and results identical to the row dot.
  const TileFn tile = kt.tile[slot];
  auto work = [&](int ith, int n) {
    for (int64_t c; (c = next_chunk.fetch_add(1, std::memory_order_relaxed)) < nchunks;) gemm_chunk(c);
    if (tg == T) return;
    // contiguous, strip-aligned share of N per thread
    const int64_t strips = (N + kRowTile - 1) / kRowTile;
    const int64_t per = (strips + n - 1) / n;
    const int64_t r0 = std::min(N, ith * per * kRowTile);
    const int64_t r1 = std::min(N, (ith + 1) * per * kRowTile);
    // If this thread's rows fit in L2, every token block passes over all of them and they come
    // from L2 after the first; if not (the output matrix), each strip meets all tokens in turn,
    // so the weights come from memory once per call.
    const bool rows_fit_l2 = (size_t)(r1 - r0) * wrb <= kL2Budget;
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


// One token through several matrices that read the same activations (q, k, v; gate, up): the
// activations are quantized once and the rows of all of them shared out in one pool run, instead
// of one run (and its wait for the slower thread) per matrix. Each row goes through the same tile
// kernel with one token as in matmul_with, so the bits are the same.
void matmul_n_with(const KernelTable& kt, const QMatrix* const* W, int n, const float* x, float* const* y, int T,
                   ThreadPool* pool, MatmulScratch* scratch) {
  bool fused = T == 1 && n > 1;
  for (int m = 0; m < n && fused; m++) {
    const int slot = type_slot(W[m]->type);
    fused = slot >= 0 && kt.tile[slot] && W[m]->K == W[0]->K && vec_dot_type(W[m]->type) == vec_dot_type(W[0]->type);
  }
  if (!fused) {
    for (int m = 0; m < n; m++) matmul_with(kt, *W[m], x, y[m], T, pool, scratch);
    return;
  }
  const int64_t K = W[0]->K;
  const GgmlType vt = vec_dot_type(W[0]->type);
  const size_t xrb = ggml_row_bytes(vt, K);
  // xq[xrb]: the token in the matrices' partner type
  std::vector<uint8_t> local;
  std::vector<uint8_t>& buf = scratch ? scratch->xq : local;
  if (buf.size() < xrb) buf.resize(xrb);
  quantize_row_for(kt, W[0]->type, x, buf.data(), K);
  const uint8_t* xq = buf.data();
  // strips of kRowTile rows of every matrix, one after the other, weighed by their bytes so each
  // thread reads about as much as the other
  size_t total = 0;
  for (int m = 0; m < n; m++) total += ggml_row_bytes(W[m]->type, K) * (size_t)W[m]->N;
  auto work = [&](int ith, int nth) {
    const size_t b0 = total * ith / nth, b1 = total * (ith + 1) / nth;  // this thread's bytes
    size_t base = 0;  // bytes of the matrices before m
    for (int m = 0; m < n; m++) {
      const QMatrix& w = *W[m];
      const size_t wrb = ggml_row_bytes(w.type, K), mb = wrb * (size_t)w.N;
      const TileFn tile = kt.tile[type_slot(w.type)];
      // the strips whose first byte falls in [b0, b1)
      auto first_strip = [&](size_t b) -> int64_t {
        if (b <= base) return 0;
        const size_t sb = wrb * kRowTile;
        return (int64_t)std::min<size_t>((b - base + sb - 1) / sb, ((size_t)w.N + kRowTile - 1) / kRowTile);
      };
      const int64_t s0 = first_strip(b0), s1 = first_strip(b1);
      for (int64_t r = s0 * kRowTile; r < std::min<int64_t>(w.N, s1 * kRowTile); r += kRowTile) {
        const int nr = (int)std::min<int64_t>(kRowTile, w.N - r);
        tile(K, w.data + (size_t)r * wrb, wrb, nr, xq, xrb, 1, y[m] + r, (size_t)w.N);
      }
      base += mb;
    }
  };
  if (pool && pool->size() > 1) pool->run(work);
  else work(0, 1);
}

}  // namespace kq
}  // namespace mb
