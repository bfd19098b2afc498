// One decoding step of grouped-query attention over a KV cache, for XLA:CPU (rlexp/perf/decode_attention.py).
//
//   q    [B, KV, G, D]  the step's queries, grouped by the KV head they read (query head = kv * G + g)
//   k, v [B, S, KV, D]  the layer's cache, this step's row already written
//   mask [B, S]         which cache positions the row may attend to (prompt padding and unwritten slots are off)
//   out  [B, KV, G, D]
//
// Same arithmetic as Tunix's decode attention (einsum, scale, mask, float32 softmax, einsum): scores and
// probabilities accumulate in float32 and are rounded to the cache's dtype where Tunix's bf16 einsums round them.
// What differs is the memory traffic: the cache is read once, in its own layout, and only at attended positions.
// XLA:CPU instead copies each layer's cache head-major every step and multiplies over every slot, masked or not.
// A row with no attended position gets Tunix's result for it, the mean of every value row.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

inline float Widen(float x) { return x; }
inline float Widen(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 -> bfloat16, round to nearest even (XLA's conversion).
inline uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// A float32 value rounded to the element type (identity for float32).
inline float Round(float x, float) { return x; }
inline float Round(float x, uint16_t) { return Widen(ToBf16(x)); }
inline void Store(float x, float* p) { *p = x; }
inline void Store(float x, uint16_t* p) { *p = ToBf16(x); }

// q . k over dim in kLanes independent partial sums, added in a fixed order: the compiler turns the lanes into
// one vector FMA per step, where a single running sum would be a chain of dependent scalar FMAs.
constexpr int64_t kLanes = 16;

template <typename T>
inline float Dot(const float* q, const T* k, int64_t dim) {
  float part[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= dim; d += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += q[d + l] * Widen(k[d + l]);
  for (int64_t half = kLanes / 2; half > 0; half /= 2)  // a tree, in vector halves, not 15 dependent adds
    for (int64_t l = 0; l < half; ++l) part[l] += part[l + half];
  float dot = part[0];
  for (; d < dim; ++d) dot += q[d] * Widen(k[d]);
  return dot;
}

// One call's operands and the batch rows still to do. The caller and the helpers it schedules on XLA's intra-op
// pool claim rows from `next` until none are left; the caller then waits for the rows claimed by helpers that did
// start. A helper that starts after the call returned claims nothing, so it never touches the buffers; it holds
// the job through a shared_ptr. No thread waits for a task that may never run, so a busy pool cannot deadlock.
template <typename T>
struct Job {
  const T *q, *k, *v;
  const bool* mask;
  T* out;
  int64_t batch, slots, kv_heads, groups, dim;
  float scale;  // rounded to T: Tunix multiplies by a Python float, cast to the scores' dtype
  std::atomic<int64_t> next{0}, done{0};

  void Work() {
    std::vector<int64_t> attended;
    std::vector<float> query(kv_heads * groups * dim), probs, acc(kv_heads * groups * dim);
    for (int64_t b; (b = next.fetch_add(1)) < batch;) {
      Row(b, attended, query, probs, acc);
      done.fetch_add(1, std::memory_order_release);
    }
  }

  // One batch row, every head: the cache is walked slot by slot, each slot's [KV, D] keys (then values) read
  // as one contiguous block, so the hardware prefetcher streams it (head by head, the reads stride 1 KB apart
  // and stall on memory).
  void Row(int64_t b, std::vector<int64_t>& attended, std::vector<float>& query, std::vector<float>& probs,
           std::vector<float>& acc) const {
    attended.clear();
    for (int64_t s = 0; s < slots; ++s)
      if (mask[b * slots + s]) attended.push_back(s);
    const bool none = attended.empty();
    if (none)
      for (int64_t s = 0; s < slots; ++s) attended.push_back(s);
    const int64_t n = static_cast<int64_t>(attended.size()), heads = kv_heads * groups;
    probs.resize(heads * n);
    const T* qb = q + b * heads * dim;  // [KV, G, D]: query head kv * G + g
    for (int64_t i = 0; i < heads * dim; ++i) query[i] = Widen(qb[i]);
    for (int64_t j = 0; j < n; ++j) {  // scores
      const T* keys = k + (b * slots + attended[j]) * kv_heads * dim;
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t g = 0; g < groups; ++g) {
          const float dot = Dot(query.data() + (h * groups + g) * dim, keys + h * dim, dim);
          probs[(h * groups + g) * n + j] = none ? 0.f : Round(Round(dot, T{}) * scale, T{});
        }
    }
    // softmax in float32 over the attended slots; the masked ones are exactly zero in Tunix's too
    for (int64_t i = 0; i < heads; ++i) {
      float* p = probs.data() + i * n;
      float top = p[0];
      for (int64_t j = 1; j < n; ++j) top = p[j] > top ? p[j] : top;
      float total = 0.f;
      for (int64_t j = 0; j < n; ++j) total += (p[j] = std::exp(p[j] - top));
      for (int64_t j = 0; j < n; ++j) p[j] = Round(p[j] / total, T{});
    }
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t j = 0; j < n; ++j) {  // values
      const T* values = v + (b * slots + attended[j]) * kv_heads * dim;
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t g = 0; g < groups; ++g) {
          const float pj = probs[(h * groups + g) * n + j];
          float* a = acc.data() + (h * groups + g) * dim;
          for (int64_t d = 0; d < dim; ++d) a[d] += pj * Widen(values[h * dim + d]);
        }
    }
    T* ob = out + b * heads * dim;
    for (int64_t i = 0; i < heads * dim; ++i) Store(acc[i], ob + i);
  }
};

template <ffi::DataType DT, typename T>
ffi::Error Run(ffi::ThreadPool pool, ffi::Buffer<DT> q, ffi::Buffer<DT> k, ffi::Buffer<DT> v,
               ffi::Buffer<ffi::PRED> mask, ffi::ResultBuffer<DT> out, float scale) {
  auto qd = q.dimensions(), kd = k.dimensions(), md = mask.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || md.size() != 2 || kd[0] != qd[0] || kd[2] != qd[1] || kd[3] != qd[3] ||
      md[0] != qd[0] || md[1] != kd[1])
    return ffi::Error::InvalidArgument("rlexp decode attention: q [B,KV,G,D], k/v [B,S,KV,D], mask [B,S]");
  auto job = std::make_shared<Job<T>>();
  job->q = static_cast<const T*>(q.untyped_data());
  job->k = static_cast<const T*>(k.untyped_data());
  job->v = static_cast<const T*>(v.untyped_data());
  job->mask = static_cast<const bool*>(mask.untyped_data());
  job->out = static_cast<T*>(out->untyped_data());
  job->batch = qd[0], job->slots = kd[1], job->kv_heads = qd[1], job->groups = qd[2], job->dim = qd[3];
  job->scale = Round(scale, T{});
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), job->batch) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([job] { job->Work(); });
  job->Work();
  while (job->done.load(std::memory_order_acquire) < job->batch) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace

#define RLEXP_DECODE_ATTENTION(NAME, DT, T)                                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, (Run<DT, T>), ffi::Ffi::Bind()                                \
                                                        .Ctx<ffi::ThreadPool>()                     \
                                                        .Arg<ffi::Buffer<DT>>()                     \
                                                        .Arg<ffi::Buffer<DT>>()                     \
                                                        .Arg<ffi::Buffer<DT>>()                     \
                                                        .Arg<ffi::Buffer<ffi::PRED>>()              \
                                                        .Ret<ffi::Buffer<DT>>()                     \
                                                        .Attr<float>("scale"));

RLEXP_DECODE_ATTENTION(RlexpDecodeAttentionF32, ffi::F32, float)
RLEXP_DECODE_ATTENTION(RlexpDecodeAttentionBF16, ffi::BF16, uint16_t)
