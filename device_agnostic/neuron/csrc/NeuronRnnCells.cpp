// The fused LSTM and GRU cells, for nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell.
//
// ATen's RNN code (aten/src/ATen/native/RNN.cpp) sends CUDA, XPU and
// PrivateUse1 inputs to _thnn_fused_lstm_cell / _thnn_fused_gru_cell, whose
// only kernels are CUDA's (RNN.cu). Those operators have no CPU kernel, so
// host execution cannot run them, and every LSTM or GRU on neuron failed with
// NotImplementedError. The kernels here compute what the CUDA kernels compute,
// composed from ATen operators that host execution runs on device memory.
//
// Autograd hands the forward's workspace to the backward
// (_thnn_fused_lstm_cell_backward_impl, _thnn_fused_gru_cell_backward), so the
// workspace layout is CUDA's, column blocks of hidden_size each:
//   LSTM (batch, 4 * hidden): sigmoid(i), sigmoid(f), tanh(g), sigmoid(o),
//        the activated gates in the order of the weights (i, f, g, o);
//   GRU  (batch, 5 * hidden): sigmoid(r), sigmoid(z), tanh(n), hx,
//        hidden_gates_n + hidden_bias_n (what r multiplies).
// Like CUDA, reduced-precision inputs (half, bfloat16) are computed in float
// and rounded once into the results and the workspace.
#include <ATen/Functions.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace neuron {
namespace {

using at::Tensor;

constexpr int64_t kLstmGates = 4;
constexpr int64_t kGruGates = 3;
constexpr int64_t kGruWorkspaceBlocks = 5;

// Column block `index` of width `width` of the 2-d `t`.
Tensor block(const Tensor& t, int64_t index, int64_t width) {
  return t.narrow(1, index * width, width);
}

Tensor defined_or_undefined(const std::optional<Tensor>& t) {
  return t.has_value() ? *t : Tensor();
}

// `t` in the type the arithmetic runs in: float for half and bfloat16.
Tensor in_op_math(const Tensor& t) {
  return t.defined() ? t.to(at::toOpMathType(t.scalar_type())) : t;
}

void check_cell_sizes(const char* op, const Tensor& input_gates, const Tensor& hidden_gates,
                      const Tensor& input_bias, const Tensor& hidden_bias, int64_t gates,
                      const Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": expected input_gates to be 2-d, but got ",
              input_gates.dim(), "-d");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op,
              ": expected input_gates and hidden_gates of the same size, but got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  const int64_t gates_size = input_gates.size(1);
  TORCH_CHECK(gates_size % gates == 0, op, ": expected input_gates.size(1) to be a multiple of ",
              gates, ", but got ", gates_size);
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": expected both biases or neither");
  if (input_bias.defined()) {
    TORCH_CHECK(input_bias.dim() == 1 && input_bias.numel() == gates_size, op,
                ": expected 1-d biases of ", gates_size, " elements, but got ",
                input_bias.sizes());
    TORCH_CHECK(input_bias.sizes() == hidden_bias.sizes(), op,
                ": expected input_bias and hidden_bias of the same size, but got ",
                input_bias.sizes(), " and ", hidden_bias.sizes());
  }
  const int64_t batch = input_gates.size(0);
  const int64_t hidden = gates_size / gates;
  TORCH_CHECK(prev.dim() == 2 && prev.size(0) == batch && prev.size(1) == hidden, op,
              ": expected the previous state of size [", batch, ", ", hidden, "], but got ",
              prev.sizes());
}

// input_gates + hidden_gates (+ input_bias + hidden_bias), CUDA's order of sums.
Tensor pre_activation(const Tensor& input_gates, const Tensor& hidden_gates,
                      const Tensor& input_bias, const Tensor& hidden_bias) {
  Tensor sum = input_gates + hidden_gates;
  if (input_bias.defined()) {
    sum = sum + input_bias + hidden_bias;
  }
  return sum;
}

// Returns (hy, cy, workspace).
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell(const Tensor& input_gates,
                                                   const Tensor& hidden_gates, const Tensor& cx,
                                                   const std::optional<Tensor>& input_bias_opt,
                                                   const std::optional<Tensor>& hidden_bias_opt) {
  const Tensor input_bias = defined_or_undefined(input_bias_opt);
  const Tensor hidden_bias = defined_or_undefined(hidden_bias_opt);
  check_cell_sizes("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias,
                   kLstmGates, cx);
  const auto dtype = input_gates.scalar_type();
  const int64_t hidden = cx.size(1);

  const Tensor gates = pre_activation(in_op_math(input_gates), in_op_math(hidden_gates),
                                      in_op_math(input_bias), in_op_math(hidden_bias));
  const Tensor in_gate = block(gates, 0, hidden).sigmoid();
  const Tensor forget_gate = block(gates, 1, hidden).sigmoid();
  const Tensor cell_gate = block(gates, 2, hidden).tanh();
  const Tensor out_gate = block(gates, 3, hidden).sigmoid();

  const Tensor cy = forget_gate * in_op_math(cx) + in_gate * cell_gate;
  const Tensor hy = out_gate * cy.tanh();
  Tensor workspace = at::cat({in_gate, forget_gate, cell_gate, out_gate}, 1).to(dtype);
  return {hy.to(dtype).contiguous(), cy.to(dtype).contiguous(), std::move(workspace)};
}

// Returns (grad_gates, grad_cx, grad_bias); grad_gates is the gradient of
// both input_gates and hidden_gates, grad_bias of both biases.
std::tuple<Tensor, Tensor, Tensor> fused_lstm_cell_backward_impl(
    const std::optional<Tensor>& grad_hy_opt, const std::optional<Tensor>& grad_cy_opt,
    const Tensor& cx, const Tensor& cy, const Tensor& workspace, bool has_bias) {
  const Tensor grad_hy = defined_or_undefined(grad_hy_opt);
  const Tensor grad_cy = defined_or_undefined(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) {
    return {};
  }
  const char* op = "_thnn_fused_lstm_cell_backward_impl";
  const Tensor& some_grad = grad_hy.defined() ? grad_hy : grad_cy;
  TORCH_CHECK(some_grad.dim() == 2, op, ": expected 2-d gradients, but got ", some_grad.dim(),
              "-d");
  const auto size = some_grad.sizes();
  TORCH_CHECK(!grad_hy.defined() || grad_hy.sizes() == size, op, ": grad_hy has size ",
              grad_hy.sizes(), ", expected ", size);
  TORCH_CHECK(!grad_cy.defined() || grad_cy.sizes() == size, op, ": grad_cy has size ",
              grad_cy.sizes(), ", expected ", size);
  TORCH_CHECK(cx.sizes() == size && cy.sizes() == size, op, ": cx and cy have sizes ",
              cx.sizes(), " and ", cy.sizes(), ", expected ", size);
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == size[0] &&
                  workspace.size(1) == kLstmGates * size[1],
              op, ": workspace has size ", workspace.sizes(), ", expected [", size[0], ", ",
              kLstmGates * size[1], "]");
  const auto dtype = workspace.scalar_type();
  const int64_t hidden = size[1];

  const Tensor ws = in_op_math(workspace);
  const Tensor in_gate = block(ws, 0, hidden);
  const Tensor forget_gate = block(ws, 1, hidden);
  const Tensor cell_gate = block(ws, 2, hidden);
  const Tensor out_gate = block(ws, 3, hidden);

  // hy = o * tanh(cy), cy = f * cx + i * g: grad_c is the whole gradient of cy.
  Tensor grad_out_gate;  // of sigmoid(o), before the sigmoid's derivative
  Tensor grad_c;
  if (grad_hy.defined()) {
    const Tensor go = in_op_math(grad_hy);
    const Tensor tanh_cy = in_op_math(cy).tanh();
    grad_out_gate = go * tanh_cy;
    grad_c = go * out_gate * (1 - tanh_cy * tanh_cy);
    if (grad_cy.defined()) {
      grad_c = grad_c + in_op_math(grad_cy);
    }
  } else {
    grad_out_gate = at::zeros_like(out_gate);
    grad_c = in_op_math(grad_cy);
  }

  const Tensor grad_i = grad_c * cell_gate * (1 - in_gate) * in_gate;
  const Tensor grad_f = grad_c * in_op_math(cx) * (1 - forget_gate) * forget_gate;
  const Tensor grad_g = grad_c * in_gate * (1 - cell_gate * cell_gate);
  const Tensor grad_o = grad_out_gate * (1 - out_gate) * out_gate;

  Tensor grad_gates = at::cat({grad_i, grad_f, grad_g, grad_o}, 1).to(dtype);
  Tensor grad_cx = (grad_c * forget_gate).to(dtype).contiguous();
  Tensor grad_bias = has_bias ? grad_gates.sum(0) : Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

// Returns (hy, workspace).
std::tuple<Tensor, Tensor> fused_gru_cell(const Tensor& input_gates, const Tensor& hidden_gates,
                                          const Tensor& hx,
                                          const std::optional<Tensor>& input_bias_opt,
                                          const std::optional<Tensor>& hidden_bias_opt) {
  const Tensor input_bias = defined_or_undefined(input_bias_opt);
  const Tensor hidden_bias = defined_or_undefined(hidden_bias_opt);
  check_cell_sizes("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias,
                   kGruGates, hx);
  const auto dtype = input_gates.scalar_type();
  const int64_t hidden = hx.size(1);

  const Tensor gi = in_op_math(input_gates);
  const Tensor gh = in_op_math(hidden_gates);
  const Tensor bi = in_op_math(input_bias);
  const Tensor bh = in_op_math(hidden_bias);
  const bool has_bias = bi.defined();

  // Reset and update gates: the first two blocks, input, hidden and biases summed.
  const int64_t rz = 2 * hidden;
  const Tensor rz_gates = pre_activation(gi.narrow(1, 0, rz), gh.narrow(1, 0, rz),
                                         has_bias ? bi.narrow(0, 0, rz) : Tensor(),
                                         has_bias ? bh.narrow(0, 0, rz) : Tensor())
                              .sigmoid();
  const Tensor reset_gate = block(rz_gates, 0, hidden);
  const Tensor update_gate = block(rz_gates, 1, hidden);

  // New gate: tanh(input_n + input_bias_n + r * (hidden_n + hidden_bias_n)).
  Tensor input_n = block(gi, 2, hidden);
  Tensor hidden_n = block(gh, 2, hidden);
  if (has_bias) {
    input_n = input_n + bi.narrow(0, rz, hidden);
    hidden_n = hidden_n + bh.narrow(0, rz, hidden);
  }
  const Tensor new_gate = (input_n + reset_gate * hidden_n).tanh();

  const Tensor hx_math = in_op_math(hx);
  const Tensor hy = new_gate + update_gate * (hx_math - new_gate);
  Tensor workspace =
      at::cat({reset_gate, update_gate, new_gate, hx_math, hidden_n}, 1).to(dtype);
  return {hy.to(dtype).contiguous(), std::move(workspace)};
}

// Returns (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
// grad_hidden_bias); the bias gradients are undefined unless has_bias.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> fused_gru_cell_backward(
    const Tensor& grad_hy, const Tensor& workspace, bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(grad_hy.dim() == 2, op, ": expected grad_hy to be 2-d, but got ", grad_hy.dim(),
              "-d");
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == kGruWorkspaceBlocks * grad_hy.size(1),
              op, ": workspace has size ", workspace.sizes(), ", expected [", grad_hy.size(0),
              ", ", kGruWorkspaceBlocks * grad_hy.size(1), "]");
  const auto dtype = grad_hy.scalar_type();
  const int64_t hidden = grad_hy.size(1);

  const Tensor ws = in_op_math(workspace);
  const Tensor reset_gate = block(ws, 0, hidden);
  const Tensor update_gate = block(ws, 1, hidden);
  const Tensor new_gate = block(ws, 2, hidden);
  const Tensor hx = block(ws, 3, hidden);
  const Tensor hidden_n = block(ws, 4, hidden);
  const Tensor go = in_op_math(grad_hy);

  // hy = n + z * (hx - n), n = tanh(in + r * hidden_n).
  const Tensor grad_z = go * (hx - new_gate) * (1 - update_gate) * update_gate;
  const Tensor grad_hx = go * update_gate;
  const Tensor grad_n = go * (1 - update_gate) * (1 - new_gate * new_gate);
  const Tensor grad_hidden_n = grad_n * reset_gate;
  const Tensor grad_r = grad_n * hidden_n * (1 - reset_gate) * reset_gate;

  Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1).to(dtype);
  Tensor grad_hidden_gates = at::cat({grad_r, grad_z, grad_hidden_n}, 1).to(dtype);
  Tensor grad_input_bias;
  Tensor grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0);
    grad_hidden_bias = grad_hidden_gates.sum(0);
  }
  return {std::move(grad_input_gates), std::move(grad_hidden_gates),
          grad_hx.to(dtype).contiguous(), std::move(grad_input_bias),
          std::move(grad_hidden_bias)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

} // namespace
} // namespace neuron
