// gelu_mul (gemma3's GeGLU): the scalar reference against the tanh-GELU formula and llama.cpp's
// f16 table semantics, then every kernel set against the reference bit for bit on every f16 input,
// the clamped ranges, odd lengths (the scalar tail) and mb::gelu_mul's routing.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check_counted.h"
#include "dispatch.h"
#include "kernels.h"
#include "ref/ref.h"

using namespace mb;
using namespace mb::kq;

static uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

static void test_reference() {
  // Known values of the tanh approximation (not of erf-GELU: 1.0 would give 0.8413).
  CHECK(std::fabs(ref::gelu_tanh(1.0f) - 0.841192f) < 1e-5f, "gelu_tanh(1) = %g", ref::gelu_tanh(1.0f));
  CHECK(std::fabs(ref::gelu_tanh(-1.0f) + 0.158808f) < 1e-5f, "gelu_tanh(-1) = %g", ref::gelu_tanh(-1.0f));
  CHECK(ref::gelu_tanh(0.0f) == 0.0f, "gelu_tanh(0)");
  // Inside (-10, 10): gelu of x rounded to f16, rounded to f16 again, times up; outside: 0 or x * up.
  const float xs[] = {-12.0f, -10.0f, -9.99f, -3.3f, -0.7f, -1e-6f, 0.0f, 0.3333333f, 1.0f, 2.5f, 9.99f, 10.0f, 12.5f};
  for (float x : xs) {
    float g = x;
    const float up = 1.75f;
    ref::gelu_mul(&g, &up, 1);
    float want;
    if (x <= -10.0f) want = 0.0f;
    else if (x >= 10.0f) want = x * up;
    else want = h2f(f2h(ref::gelu_tanh(h2f(f2h(x))))) * up;
    CHECK(same(g, want), "ref gelu_mul(%g) = %g, want %g", x, g, want);
    if (x > -10.0f && x < 10.0f)
      CHECK(std::fabs(g - ref::gelu_tanh(x) * up) <= 4e-3f * std::fabs(up) * (1.0f + std::fabs(x)),
            "ref gelu_mul(%g) = %g is far from the f32 formula %g", x, g, ref::gelu_tanh(x) * up);
  }
}

// Every f16 value as an input (NaN and inf included), with varied up values, through each set.
static void test_set(const KernelTable& kt) {
  const int n = 65536 + 7;  // not a multiple of 8: the scalar tail runs too
  std::vector<float> x(n), up(n);
  for (int i = 0; i < n; i++) {
    x[i] = i < 65536 ? h2f((half)i) : 0.1f * (float)(i - 65536) - 0.3f;
    up[i] = 0.5f + 0.001f * (float)(i % 997);
  }
  // values that are not f16 and straddle the clamps
  for (int i = 0; i < 64; i++) x[(size_t)i * 997 % 65536] = -10.5f + 0.33f * (float)i;
  std::vector<float> a = x, b = x;
  kt.gelu_mul(a.data(), up.data(), n);
  ref::gelu_mul(b.data(), up.data(), n);
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (!same(a[i], b[i])) {
      if (bad < 5) CHECK(false, "%s gelu_mul x=%g: %g, ref %g", kt.name, x[i], a[i], b[i]);
      bad++;
    }
  CHECK(bad == 0, "%s gelu_mul: %d of %d differ from the reference", kt.name, bad, n);
  for (int len : {0, 1, 7, 8, 9, 31}) {  // short rows touch nothing past n
    std::vector<float> c(40, 3.0f), d(40, 3.0f);
    kt.gelu_mul(c.data(), up.data(), len);
    ref::gelu_mul(d.data(), up.data(), len);
    bool eq = true;
    for (int i = 0; i < 40; i++) eq &= same(c[i], d[i]);
    CHECK(eq, "%s gelu_mul n=%d", kt.name, len);
  }
}

int main() {
  test_reference();
  test_set(ref_table());
  if (const KernelTable* t = avx2_table()) test_set(*t);
  else std::printf("no AVX2 set on this CPU: only the reference checked\n");
  if (const KernelTable* t = avx512_table()) test_set(*t);
  std::vector<float> g(19, 0.7f), g2(19, 0.7f), u(19, 1.3f);
  gelu_mul(g.data(), u.data(), 19);
  active_table().gelu_mul(g2.data(), u.data(), 19);
  CHECK(g == g2, "mb::gelu_mul routes elsewhere");
  std::printf("%d/%d checks passed\n", g_checks - g_fail, g_checks);
  return g_fail ? 1 : 0;
}
