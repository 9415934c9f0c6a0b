// hpcqa's fused CPU attention passes for training (hpcqa/rank/train/fused.py builds and loads this file).
//
// The attention of a training step is scores = q k^T, probs = softmax(scale * scores, padding mask),
// dropped = dropout(probs), out = dropped v. The two matmuls stay ATen's (oneDNN/MKL: AMX or AVX-512 with fp32
// accumulation); everything between them is one pass per row here, forward and backward:
//   forward  (softmax_dropout_fwd): scores row -> scale -> mask -> softmax -> probs (written over the scores, which
//            nothing else keeps) and dropped = keep ? probs / keep_probability : 0 (a new tensor);
//   backward (softmax_dropout_bwd): d_dropped row, probs row -> d_probs = keep ? d_dropped / keep_probability : 0
//            -> d_scores = scale * probs * (d_probs - sum(d_probs * probs)), written over d_dropped.
// The dropout mask is never stored: keep is a counter-based hash of (seed, row, column / 4), so the backward
// draws the same mask again. One 64-bit hash gives the 16-bit uniforms of four columns; a column is kept when its
// uniform >= threshold (round(p * 65536)), the keep probability is (65536 - threshold) / 65536 exactly and the kept
// values are divided by it, so the expected output is the input, as with torch's dropout.
// Math is fp32 whatever the tensors' dtype (float or bfloat16, bf16 rounded to nearest even on the way out).
// Rows are independent: they are split over the rank's threads (at::parallel_for).
// The hidden dropout (dropout) is the same draw over a tensor's flat index: one pass forward, one backward, no mask
// kept.

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

constexpr int64_t LEVELS = 1 << 16;

inline uint64_t mix(uint64_t z) {  // splitmix64's output function (Steele, Lea, Flood 2014)
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// the 16-bit uniforms of one row's columns: u[j] for j < groups * 4
inline void row_uniforms(uint64_t seed, int64_t row, int64_t groups, uint16_t* u) {
  const uint64_t base = seed + static_cast<uint64_t>(row) * static_cast<uint64_t>(groups) * 0x9E3779B97F4A7C15ULL;
  uint64_t* w = reinterpret_cast<uint64_t*>(u);
  for (int64_t g = 0; g < groups; ++g) {
    w[g] = mix(base + static_cast<uint64_t>(g) * 0x9E3779B97F4A7C15ULL);
  }
}

inline float to_float(float x) { return x; }
inline float to_float(c10::BFloat16 x) {
  uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline void store(float* dst, float x) { *dst = x; }
inline void store(c10::BFloat16* dst, float x) {  // round to nearest even (values here are finite)
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  dst->x = static_cast<uint16_t>(bits >> 16);
}

template <typename T>
inline void load_row(const T* src, float* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = to_float(src[j]);
}

inline float row_max(const float* x, int64_t n) {
  int64_t j = 0;
  Vec m(-FLT_MAX);
  for (; j + Vec::size() <= n; j += Vec::size()) m = at::vec::maximum(m, Vec::loadu(x + j));
  float out = at::vec::vec_reduce_all<float>([](const Vec& a, const Vec& b) { return at::vec::maximum(a, b); }, m);
  for (; j < n; ++j) out = std::max(out, x[j]);
  return out;
}

// x[j] = exp(x[j] - max) in place; -> the sum
inline float exp_sum(float* x, int64_t n, float max) {
  int64_t j = 0;
  Vec s(0.f), vmax(max);
  for (; j + Vec::size() <= n; j += Vec::size()) {
    Vec e = (Vec::loadu(x + j) - vmax).exp_u20();
    e.store(x + j);
    s = s + e;
  }
  float out = at::vec::vec_reduce_all<float>([](const Vec& a, const Vec& b) { return a + b; }, s);
  if (j < n) {
    Vec e = (Vec::loadu(x + j, n - j) - vmax).exp_u20();
    e.store(x + j, n - j);
    alignas(64) float tail[Vec::size()] = {0};
    e.store(tail, n - j);
    for (int64_t t = 0; t < n - j; ++t) out += tail[t];
  }
  return out;
}

inline float dot_product(const float* a, const float* b, int64_t n) {
  int64_t j = 0;
  Vec acc(0.f);
  for (; j + Vec::size() <= n; j += Vec::size()) acc = at::vec::fmadd(Vec::loadu(a + j), Vec::loadu(b + j), acc);
  float out = at::vec::vec_reduce_all<float>([](const Vec& x, const Vec& y) { return x + y; }, acc);
  for (; j < n; ++j) out += a[j] * b[j];
  return out;
}

struct Dropout {
  float p;
  int64_t threshold;
  float inv_keep;
  explicit Dropout(double p_) : p(static_cast<float>(p_)) {
    threshold = std::min<int64_t>(std::max<int64_t>(std::llround(p_ * LEVELS), 0), LEVELS);
    inv_keep = threshold < LEVELS ? static_cast<float>(LEVELS) / static_cast<float>(LEVELS - threshold) : 0.f;
  }
  bool on() const { return threshold > 0; }
};

template <typename T>
void softmax_dropout_fwd_impl(at::Tensor& scores, at::Tensor& dropped, const c10::optional<at::Tensor>& mask,
                              double scale_, const Dropout& d, uint64_t seed) {
  const int64_t b = scores.size(0), h = scores.size(1), sq = scores.size(2), sk = scores.size(3);
  const int64_t rows = b * h * sq, groups = (sk + 3) / 4;
  const float scale = static_cast<float>(scale_);
  T* s = scores.data_ptr<T>();
  T* out = dropped.data_ptr<T>();
  const bool* m = nullptr;
  int64_t mb = 0, mh = 0, mi = 0, mj = 0;
  if (mask.has_value()) {
    const at::Tensor& t = *mask;
    m = t.data_ptr<bool>();
    mb = t.size(0) == 1 ? 0 : t.stride(0);
    mh = t.size(1) == 1 ? 0 : t.stride(1);
    mi = t.size(2) == 1 ? 0 : t.stride(2);
    mj = t.size(3) == 1 ? 0 : t.stride(3);
  }
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> x(sk);
    std::vector<uint64_t> words(groups);
    uint16_t* u = reinterpret_cast<uint16_t*>(words.data());
    for (int64_t r = begin; r < end; ++r) {
      T* row = s + r * sk;
      load_row(row, x.data(), sk);
      const int64_t i = r % sq, bh = r / sq, hh = bh % h, bb = bh / h;
      if (m) {
        const bool* mrow = m + bb * mb + hh * mh + i * mi;
        if (mj == 1) {  // a row of the mask is contiguous bytes (0 or 1): a loop the compiler vectorizes
          const uint8_t* mr = reinterpret_cast<const uint8_t*>(mrow);
          for (int64_t j = 0; j < sk; ++j) x[j] = mr[j] ? x[j] * scale : -FLT_MAX;
        } else {
          for (int64_t j = 0; j < sk; ++j) x[j] = mrow[j * mj] ? x[j] * scale : -FLT_MAX;
        }
      } else {
        for (int64_t j = 0; j < sk; ++j) x[j] *= scale;
      }
      const float inv_sum = 1.f / exp_sum(x.data(), sk, row_max(x.data(), sk));
      T* orow = out + r * sk;
      if (d.on()) {
        row_uniforms(seed, r, groups, u);
        const float kept = inv_sum * d.inv_keep;
        const uint16_t thr = static_cast<uint16_t>(std::min<int64_t>(d.threshold, LEVELS - 1));
        const bool all_dropped = d.threshold >= LEVELS;
        for (int64_t j = 0; j < sk; ++j) {
          const float e = x[j];
          store(row + j, e * inv_sum);
          store(orow + j, (!all_dropped && u[j] >= thr) ? e * kept : 0.f);
        }
      } else {
        for (int64_t j = 0; j < sk; ++j) {
          store(row + j, x[j] * inv_sum);
          store(orow + j, x[j] * inv_sum);
        }
      }
    }
  });
}

template <typename T>
void softmax_dropout_bwd_impl(at::Tensor& grad, const at::Tensor& probs, double scale_, const Dropout& d,
                              uint64_t seed) {
  const int64_t sk = grad.size(3);
  const int64_t rows = grad.numel() / sk, groups = (sk + 3) / 4;
  const float scale = static_cast<float>(scale_);
  T* g = grad.data_ptr<T>();
  const T* p = probs.data_ptr<T>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> dp(sk), pr(sk);
    std::vector<uint64_t> words(groups);
    uint16_t* u = reinterpret_cast<uint16_t*>(words.data());
    const uint16_t thr = static_cast<uint16_t>(std::min<int64_t>(d.threshold, LEVELS - 1));
    const bool all_dropped = d.threshold >= LEVELS;
    for (int64_t r = begin; r < end; ++r) {
      T* grow = g + r * sk;
      load_row(p + r * sk, pr.data(), sk);
      if (d.on()) {
        row_uniforms(seed, r, groups, u);
        for (int64_t j = 0; j < sk; ++j)
          dp[j] = (!all_dropped && u[j] >= thr) ? to_float(grow[j]) * d.inv_keep : 0.f;
      } else {
        load_row(grow, dp.data(), sk);
      }
      const float dot = dot_product(dp.data(), pr.data(), sk);
      for (int64_t j = 0; j < sk; ++j) store(grow + j, scale * pr[j] * (dp[j] - dot));
    }
  });
}

// hidden dropout: out[i] = keep(i) ? x[i] / keep_probability : 0, keep(i) from the same hash over the flat index
// (one 64-bit hash per four elements). Its backward is the same op on the gradient with the same seed.
template <typename T>
void dropout_impl(const T* x, T* out, int64_t n, const Dropout& d, uint64_t seed) {
  constexpr int64_t BLOCK = 1024;  // elements per hash batch (a multiple of 4)
  const int64_t blocks = (n + BLOCK - 1) / BLOCK;
  const uint16_t thr = static_cast<uint16_t>(std::min<int64_t>(d.threshold, LEVELS - 1));
  const bool all_dropped = d.threshold >= LEVELS;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    uint64_t words[BLOCK / 4];
    const uint16_t* u = reinterpret_cast<const uint16_t*>(words);
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t start = blk * BLOCK, len = std::min(BLOCK, n - start);
      const uint64_t base = seed + static_cast<uint64_t>(start / 4) * 0x9E3779B97F4A7C15ULL;
      for (int64_t g = 0; g < (len + 3) / 4; ++g) words[g] = mix(base + static_cast<uint64_t>(g) * 0x9E3779B97F4A7C15ULL);
      const T* xs = x + start;
      T* os = out + start;
      for (int64_t j = 0; j < len; ++j)
        store(os + j, (!all_dropped && u[j] >= thr) ? to_float(xs[j]) * d.inv_keep : 0.f);
    }
  });
}

void check(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), "hpcqa fused attention: ", name, " must be on the CPU");
  TORCH_CHECK(t.dim() == 4, "hpcqa fused attention: ", name, " must be [batch, heads, q, k]");
  TORCH_CHECK(t.is_contiguous(), "hpcqa fused attention: ", name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16,
              "hpcqa fused attention: ", name, " must be float32 or bfloat16");
}

// scores (overwritten with the probabilities) -> the dropped probabilities
at::Tensor softmax_dropout_fwd(at::Tensor scores, const c10::optional<at::Tensor>& mask, double scale, double p,
                               int64_t seed) {
  check(scores, "scores");
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 4, "hpcqa fused attention: mask must be 4-d bool");
    for (int k = 0; k < 4; ++k)
      TORCH_CHECK(mask->size(k) == 1 || mask->size(k) == scores.size(k),
                  "hpcqa fused attention: mask does not broadcast to the scores");
  }
  at::Tensor dropped = at::empty_like(scores);
  const Dropout d(p);
  if (scores.scalar_type() == at::kFloat)
    softmax_dropout_fwd_impl<float>(scores, dropped, mask, scale, d, static_cast<uint64_t>(seed));
  else
    softmax_dropout_fwd_impl<c10::BFloat16>(scores, dropped, mask, scale, d, static_cast<uint64_t>(seed));
  return dropped;
}

// grad of the dropped probabilities (overwritten with the grad of the scores)
void softmax_dropout_bwd(at::Tensor grad, const at::Tensor& probs, double scale, double p, int64_t seed) {
  check(grad, "grad");
  check(probs, "probs");
  TORCH_CHECK(grad.sizes() == probs.sizes() && grad.scalar_type() == probs.scalar_type(),
              "hpcqa fused attention: grad and probs differ in shape or dtype");
  const Dropout d(p);
  if (grad.scalar_type() == at::kFloat)
    softmax_dropout_bwd_impl<float>(grad, probs, scale, d, static_cast<uint64_t>(seed));
  else
    softmax_dropout_bwd_impl<c10::BFloat16>(grad, probs, scale, d, static_cast<uint64_t>(seed));
}

at::Tensor dropout(const at::Tensor& x, double p, int64_t seed) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous(), "hpcqa fused dropout: x must be contiguous on the CPU");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "hpcqa fused dropout: x must be float32 or bfloat16");
  at::Tensor out = at::empty_like(x);
  const Dropout d(p);
  if (x.scalar_type() == at::kFloat)
    dropout_impl<float>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), d, static_cast<uint64_t>(seed));
  else
    dropout_impl<c10::BFloat16>(x.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), x.numel(), d,
                                static_cast<uint64_t>(seed));
  return out;
}

}  // namespace

TORCH_LIBRARY(hpcqa_fused, m) {
  m.def("softmax_dropout_fwd(Tensor(a!) scores, Tensor? mask, float scale, float p, int seed) -> Tensor");
  m.def("softmax_dropout_bwd(Tensor(a!) grad, Tensor probs, float scale, float p, int seed) -> ()");
  m.def("dropout(Tensor x, float p, int seed) -> Tensor");
}

TORCH_LIBRARY_IMPL(hpcqa_fused, CPU, m) {
  m.impl("softmax_dropout_fwd", &softmax_dropout_fwd);
  m.impl("softmax_dropout_bwd", &softmax_dropout_bwd);
  m.impl("dropout", &dropout);
}
