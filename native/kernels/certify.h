// The start-up gate: before a server serves with a kernel set, each of that set's kernels runs on
// this CPU against the scalar reference (ref/), on the weight types the model really holds. A set
// that disagrees is not served with (a miscompiled or mis-dispatched SIMD path would otherwise
// answer wrong tokens silently). Private to kernels/ and its callers; no I/O.
#pragma once
#include <string>
#include <vector>

#include "dispatch.h"

namespace mb {
namespace kq {

struct Certification {
  bool passed = true;
  std::string failures;  // "; "-separated, each naming the kernel, the type and the numbers
  std::string summary() const { return passed ? "passed" : "failed: " + failures; }
};

// Runs kt against ref_table(): the GEMM driver (one token: the row dot; nine tokens: the tile
// and 8-token GEMM paths, which also exercises the activation quantizer) on the first rows of
// each sample weight matrix, and the elementwise kernels, f16 conversion and attention on
// synthetic data. Samples of types without a dot product are skipped (the model never multiplies
// them). Tolerances are the parity tests' (tests/test_kernels.cpp, tests/test_attention.cpp) with
// headroom: the gate catches wrong kernels, the tests hold the exact numerics.
Certification certify(const KernelTable& kt, const std::vector<QMatrix>& samples);

}  // namespace kq
}  // namespace mb
