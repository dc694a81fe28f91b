// Fused attention: which kernel F.scaled_dot_product_attention runs on neuron.
//
// aten::scaled_dot_product_attention asks the device's _fused_sdp_choice_stub
// which backend to use, and takes the math path (attention materialised with
// matmul, softmax and dropout operators) on a device that registers none.
// The CPU's choice function picks its flash-attention kernel
// (_scaled_dot_product_flash_attention_for_cpu) for float inputs without
// dropout; the math path rounds differently, so a transformer on neuron
// drifted from the same one on the CPU (a Llama's parameters by 5.5e-6 after
// four AdamW steps). Neuron answers with the CPU's own choice function, so it
// takes the flash path exactly where the CPU does; the flash kernel and its
// backward then run by host execution, the CPU kernel on device memory, and
// the results are the CPU's bit for bit.
//
// The choice reads only metadata (shapes, strides, dtypes, dropout, the
// torch.backends flags that enable or disable each backend), never device
// memory, so it is asked with the neuron tensors themselves, also under
// torch.compile's fake tensors (whose Meta choice function asks this stub
// for a PrivateUse1 query).
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

#include <optional>

namespace neuron {
namespace {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal,
                                           scale, enable_gqa);
}

} // namespace
} // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::fused_sdp_choice)
} // namespace at::native
