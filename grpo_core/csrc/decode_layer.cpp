// One decoder layer of grpo_core.decode's sampling loop (decode._Layer.__call__) as a single op.
//
// Why C++: at the sizes grpo_core trains on a CPU, a decode step of a layer is ~40 small ATen ops whose
// Python dispatch costs more than their arithmetic. These are the same ATen ops, in the same order and
// dtypes, as decode._Layer, so the outputs and the cache writes are bitwise the same
// (tests/test_native.py); only the Python between them is gone. Built by `python -m grpo_core.native`.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

using at::Tensor;
using OptTensor = std::optional<Tensor>;

// `x @ W.T + b`; W is either a plain weight (F.linear) or one that oneDNN holds prepacked
// (decode._Projection), whose product is `mkldnn::_linear_pointwise`, as in Python.
static Tensor project(const Tensor& x, const Tensor& weight, const OptTensor& bias) {
  if (!weight.is_mkldnn()) return at::linear(x, weight, bias);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                       .typed<Tensor(const Tensor&, const Tensor&, const OptTensor&, c10::string_view,
                                     c10::List<std::optional<at::Scalar>>, std::optional<c10::string_view>)>();
  return op.call(x, weight, bias, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

// decode._norm: one fused RMSNorm on float32, else normalised in float32 and scaled in x's dtype.
static Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  if (x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat)
    return at::rms_norm(x, weight.sizes(), weight, eps);
  return at::rms_norm(x.to(at::kFloat), weight.sizes(), std::nullopt, eps).to(x.scalar_type()) * weight;
}

// x (B, T, hidden) -> (B, T, hidden); writes this step's keys and values (float32) into the caches
// (B, KV, L, D) at [start, start + T). `matmul_dtype` is the weights' dtype under autocast, else none.
static Tensor decode_layer(const Tensor& x, const Tensor& norm1, const Tensor& norm2, double eps,
                           const Tensor& qkv_weight, const OptTensor& qkv_bias, const Tensor& o_weight,
                           const OptTensor& o_bias, const Tensor& gate_up_weight, const OptTensor& gate_up_bias,
                           const Tensor& down_weight, const OptTensor& down_bias, const OptTensor& q_norm,
                           const OptTensor& k_norm, double qk_eps, const Tensor& cos, const Tensor& sin,
                           const Tensor& keys, const Tensor& values, const Tensor& mask, int64_t start,
                           int64_t heads, int64_t kv_heads, double scaling,
                           std::optional<at::ScalarType> matmul_dtype) {
  auto cast = [&](const Tensor& h) { return matmul_dtype ? h.to(*matmul_dtype) : h; };
  const int64_t b = x.size(0), t = x.size(1), d = keys.size(3);
  Tensor qkv = project(cast(rms_norm(x, norm1, eps)), qkv_weight, qkv_bias);          // (B, T, (H+2KV)*D)
  Tensor qk = qkv.narrow(-1, 0, (heads + kv_heads) * d).view({b, t, -1, d});             // (B, T, H+KV, D)
  Tensor v = qkv.narrow(-1, (heads + kv_heads) * d, kv_heads * d).view({b, t, -1, d}).transpose(1, 2);
  if (q_norm) {  // Qwen3: RMSNorm over each head's q and k
    qk = at::cat({rms_norm(qk.narrow(2, 0, heads), *q_norm, qk_eps),
                  rms_norm(qk.narrow(2, heads, kv_heads), *k_norm, qk_eps)}, 2);
  }
  qk = qk.transpose(1, 2).to(cos.scalar_type());                                          // (B, H+KV, T, D)
  Tensor rotated = at::cat({qk.narrow(-1, d / 2, d / 2).neg(), qk.narrow(-1, 0, d / 2)}, -1);  // rotate_half
  Tensor qk_rotated = qk * cos + rotated * sin;
  Tensor q = qk_rotated.narrow(1, 0, heads), k = qk_rotated.narrow(1, heads, kv_heads);
  keys.narrow(2, start, t).copy_(k);
  values.narrow(2, start, t).copy_(v);
  const int64_t end = start + t;
  Tensor out = at::scaled_dot_product_attention(q.to(at::kFloat), keys.narrow(2, 0, end), values.narrow(2, 0, end),
                                                mask, 0.0, false, scaling, heads != kv_heads);  // (B, H, T, D)
  Tensor h = x + project(cast(out.transpose(1, 2).reshape({b, t, -1})), o_weight, o_bias);
  std::vector<Tensor> gate_up = project(cast(rms_norm(h, norm2, eps)), gate_up_weight, gate_up_bias).chunk(2, -1);
  return h + project(at::silu(gate_up[0]) * gate_up[1], down_weight, down_bias);
}

TORCH_LIBRARY(grpo_core, m) {
  m.def(
      "decode_layer(Tensor x, Tensor norm1, Tensor norm2, float eps, Tensor qkv_weight, Tensor? qkv_bias, "
      "Tensor o_weight, Tensor? o_bias, Tensor gate_up_weight, Tensor? gate_up_bias, Tensor down_weight, "
      "Tensor? down_bias, Tensor? q_norm, Tensor? k_norm, float qk_eps, Tensor cos, Tensor sin, Tensor(a!) keys, "
      "Tensor(b!) values, Tensor mask, int start, int heads, int kv_heads, float scaling, "
      "ScalarType? matmul_dtype) -> Tensor");
  m.impl("decode_layer", c10::DispatchKey::CompositeExplicitAutograd, TORCH_FN(decode_layer));
}
