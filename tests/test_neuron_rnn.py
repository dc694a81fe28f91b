"""RNNs on neuron: ATen sends them to the fused cells (_thnn_fused_{lstm,gru}_cell), CUDA-only in
ATen, which neuron implements (csrc/NeuronRnnCells.cpp). Results and gradients must match CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

aten = torch.ops.aten


def _assert_close(actual, expected, **tolerance) -> None:
    if expected is None:
        assert actual is None
        return
    assert actual.device.type == "neuron", f"result on {actual.device}, expected neuron"
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, **tolerance)


def _flatten(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _flatten(item)]


def _run_both(module: nn.Module, *inputs: torch.Tensor, **tolerance) -> None:
    """Forward and backward of ``module`` on CPU and of a copy on neuron, from the same weights."""
    on_neuron = copy.deepcopy(module).to("neuron")
    cpu_inputs = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    neuron_inputs = [t.to("neuron").requires_grad_(t.is_floating_point()) for t in inputs]

    expected = _flatten(module(*cpu_inputs))
    actual = _flatten(on_neuron(*neuron_inputs))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        _assert_close(a, e, **tolerance)

    # A different weight for every output element, so that no gradient cancels out.
    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(e.shape, generator=generator) for e in expected]
    sum((e * w).sum() for e, w in zip(expected, weights, strict=True)).backward()
    sum((a * w.to("neuron")).sum() for a, w in zip(actual, weights, strict=True)).backward()

    for c, n in zip(cpu_inputs, neuron_inputs, strict=True):
        _assert_close(n.grad, c.grad, **tolerance)
    cpu_params = dict(module.named_parameters())
    neuron_params = dict(on_neuron.named_parameters())
    assert cpu_params.keys() == neuron_params.keys()
    for name, param in cpu_params.items():
        assert param.grad is not None, name
        _assert_close(neuron_params[name].grad, param.grad)


class Calling(nn.Module):
    """``module`` called through ``call(module, *inputs)``: initial states in the argument list."""

    def __init__(self, module: nn.Module, call) -> None:
        super().__init__()
        self.module = module
        self.call = call

    def forward(self, *inputs):
        return self.call(self.module, *inputs)


RNN_CASES = {
    "1layer": dict(num_layers=1, batch_first=False, bias=True, bidirectional=False),
    "1layer_batch_first": dict(num_layers=1, batch_first=True, bias=True, bidirectional=False),
    "1layer_no_bias": dict(num_layers=1, batch_first=False, bias=False, bidirectional=False),
    "2layers": dict(num_layers=2, batch_first=False, bias=True, bidirectional=False),
    "2layers_batch_first_no_bias": dict(
        num_layers=2, batch_first=True, bias=False, bidirectional=False
    ),
    "2layers_bidirectional": dict(num_layers=2, batch_first=True, bias=True, bidirectional=True),
}


@pytest.mark.parametrize("case", sorted(RNN_CASES))
@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM], ids=["GRU", "LSTM"])
def test_rnn_matches_cpu(kind, case):
    torch.manual_seed(0)
    options = RNN_CASES[case]
    module = kind(input_size=5, hidden_size=6, **options)
    x = torch.randn((3, 4, 5) if options["batch_first"] else (4, 3, 5))
    _run_both(module, x)


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM], ids=["GRU", "LSTM"])
def test_rnn_with_initial_state_matches_cpu(kind):
    torch.manual_seed(0)
    module = kind(input_size=5, hidden_size=6, num_layers=2, bidirectional=True)
    x = torch.randn(4, 3, 5)
    h0 = torch.randn(4, 3, 6)
    if kind is nn.LSTM:
        c0 = torch.randn(4, 3, 6)
        _run_both(Calling(module, lambda m, x, h, c: m(x, (h, c))), x, h0, c0)
    else:
        _run_both(Calling(module, lambda m, x, h: m(x, h)), x, h0)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_lstm_with_projections_matches_cpu():
    torch.manual_seed(0)
    module = nn.LSTM(5, 6, num_layers=2, proj_size=3, bidirectional=True)
    _run_both(module, torch.randn(4, 3, 5))


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM], ids=["GRU", "LSTM"])
def test_packed_sequence_matches_cpu(kind):
    torch.manual_seed(0)
    module = kind(5, 6, num_layers=2)

    def call(m, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, [4, 3, 1], enforce_sorted=True)
        output, state = m(packed)
        return output.data, state

    _run_both(Calling(module, call), torch.randn(4, 3, 5))


def test_rnn_tanh_and_relu_match_cpu():
    torch.manual_seed(0)
    for nonlinearity in ("tanh", "relu"):
        module = nn.RNN(5, 6, num_layers=2, nonlinearity=nonlinearity, bidirectional=True)
        _run_both(module, torch.randn(4, 3, 5))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("kind", [nn.GRUCell, nn.LSTMCell], ids=["GRUCell", "LSTMCell"])
def test_cell_matches_cpu(kind, bias):
    torch.manual_seed(0)
    module = kind(5, 6, bias=bias)
    x = torch.randn(3, 5)
    h = torch.randn(3, 6)
    if kind is nn.LSTMCell:
        c = torch.randn(3, 6)
        _run_both(Calling(module, lambda m, x, h, c: m(x, (h, c))), x, h, c)
    else:
        _run_both(Calling(module, lambda m, x, h: m(x, h)), x, h)


def test_cells_use_the_fused_operators_on_neuron():
    torch.manual_seed(0)
    x = torch.randn(3, 5, device="neuron", requires_grad=True)
    gru = nn.GRUCell(5, 6).to("neuron")
    assert gru(x).grad_fn.name() == "ThnnFusedGruCellBackward0"
    lstm = nn.LSTMCell(5, 6).to("neuron")
    hy, cy = lstm(x)
    assert hy.grad_fn.name() == cy.grad_fn.name() == "ThnnFusedLstmCellBackward0"


# The fused operators against the same math, unfused, differentiated by autograd on CPU.


def _gates(batch: int, hidden: int, gates: int, bias: bool, generator: torch.Generator):
    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    input_gates = draw(batch, gates * hidden)
    hidden_gates = draw(batch, gates * hidden)
    biases = (draw(gates * hidden), draw(gates * hidden)) if bias else (None, None)
    return input_gates, hidden_gates, draw(batch, hidden), *biases


def _unfused_gru(input_gates, hidden_gates, hx, input_bias, hidden_bias):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = torch.sigmoid(ir + hr)
    z = torch.sigmoid(ii + hi)
    n = torch.tanh(in_ + r * hn)
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _unfused_lstm(input_gates, hidden_gates, cx, input_bias, hidden_bias):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _differentiable(tensors):
    return [None if t is None else t.clone().requires_grad_() for t in tensors]


def _on_neuron(tensors):
    return [None if t is None else t.detach().to("neuron").requires_grad_() for t in tensors]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_fused_gru_cell_matches_unfused_autograd(bias):
    generator = torch.Generator().manual_seed(0)
    inputs = _gates(4, 6, 3, bias, generator)
    grad_hy = torch.randn(4, 6, generator=generator)

    cpu = _differentiable(inputs)
    hy, workspace = _unfused_gru(*cpu)
    hy.backward(grad_hy)

    neuron = _on_neuron(inputs)
    hy_n, workspace_n = aten._thnn_fused_gru_cell(*neuron)
    _assert_close(hy_n, hy.detach())
    _assert_close(workspace_n, workspace.detach())  # CUDA's layout: r, z, n, hx, hn + b_hn
    hy_n.backward(grad_hy.to("neuron"))  # autograd hands the workspace to the fused backward
    for n, c in zip(neuron, cpu, strict=True):
        _assert_close(None if n is None else n.grad, None if c is None else c.grad)

    # The backward operator itself, called with the forward's workspace.
    grads = aten._thnn_fused_gru_cell_backward(grad_hy.to("neuron"), workspace_n.detach(), bias)
    expected = [cpu[0].grad, cpu[1].grad, cpu[2].grad, cpu[3], cpu[4]]
    if bias:
        expected[3:] = [cpu[3].grad, cpu[4].grad]
    for g, e in zip(grads, expected, strict=True):
        _assert_close(g, e)


@pytest.mark.parametrize("which", ["both", "hy", "cy"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_fused_lstm_cell_matches_unfused_autograd(bias, which):
    generator = torch.Generator().manual_seed(0)
    inputs = _gates(4, 6, 4, bias, generator)
    grad_hy = torch.randn(4, 6, generator=generator) if which != "cy" else None
    grad_cy = torch.randn(4, 6, generator=generator) if which != "hy" else None

    def backward(hy, cy, device):
        outputs = [t for t, g in ((hy, grad_hy), (cy, grad_cy)) if g is not None]
        grads = [g.to(device) for g in (grad_hy, grad_cy) if g is not None]
        torch.autograd.backward(outputs, grads)

    cpu = _differentiable(inputs)
    hy, cy, workspace = _unfused_lstm(*cpu)
    backward(hy, cy, "cpu")

    neuron = _on_neuron(inputs)
    hy_n, cy_n, workspace_n = aten._thnn_fused_lstm_cell(*neuron)
    _assert_close(hy_n, hy.detach())
    _assert_close(cy_n, cy.detach())
    _assert_close(workspace_n, workspace.detach())  # CUDA's layout: i, f, g, o activated
    backward(hy_n, cy_n, "neuron")
    for n, c in zip(neuron, cpu, strict=True):
        _assert_close(None if n is None else n.grad, None if c is None else c.grad)

    # The backward operator itself: (grad_gates, grad_cx, grad_bias).
    grad_gates, grad_cx, grad_bias = aten._thnn_fused_lstm_cell_backward_impl(
        None if grad_hy is None else grad_hy.to("neuron"),
        None if grad_cy is None else grad_cy.to("neuron"),
        neuron[2].detach(),
        cy_n.detach(),
        workspace_n.detach(),
        bias,
    )
    _assert_close(grad_gates, cpu[0].grad)
    _assert_close(grad_cx, cpu[2].grad)
    _assert_close(grad_bias, cpu[3].grad if bias else None)


def test_fused_lstm_cell_backward_without_gradients_returns_nothing():
    cx = torch.randn(2, 3, device="neuron")
    workspace = torch.rand(2, 12, device="neuron")
    assert aten._thnn_fused_lstm_cell_backward_impl(None, None, cx, cx, workspace, True) == (
        None,
        None,
        None,
    )


def test_double_backward_matches_cpu():
    """create_graph=True takes the differentiable (unfused) backward; it must work on neuron."""
    torch.manual_seed(0)
    for kind in (nn.GRUCell, nn.LSTMCell):
        module = kind(5, 6)
        on_neuron = copy.deepcopy(module).to("neuron")
        results = []
        for m, device in ((module, "cpu"), (on_neuron, "neuron")):
            x = torch.randn(3, 5, generator=torch.Generator().manual_seed(2)).to(device)
            x.requires_grad_()
            out = _flatten(m(x))
            (gx,) = torch.autograd.grad(sum(o.sum() for o in out), x, create_graph=True)
            (ggx,) = torch.autograd.grad((gx * gx).sum(), x)
            results.append((gx.detach(), ggx))
        for a, e in zip(_flatten(results[1]), _flatten(results[0]), strict=True):
            _assert_close(a, e)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_lstm_and_gru(dtype):
    torch.manual_seed(0)
    for kind in (nn.GRU, nn.LSTM):
        module = kind(5, 6, num_layers=2)
        expected = module(torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(3)))[0]
        on_neuron = copy.deepcopy(module).to("neuron", dtype)
        x = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(3))
        out = on_neuron(x.to("neuron", dtype))[0]
        assert out.dtype == dtype
        out.float().sum().backward()
        assert all(p.grad is not None and p.grad.dtype == dtype for p in on_neuron.parameters())
        torch.testing.assert_close(out.float().cpu(), expected.detach(), atol=3e-2, rtol=3e-2)
