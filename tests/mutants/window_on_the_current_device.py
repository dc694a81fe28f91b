"""A window factory that allocates on the current device: hann_window on neuron builds the
window and places it on torch.accelerator's current device, ignoring the index in
``device=`` (OpenReg's windows did this). Right whenever device 0 is current and named."""

import torch

from mutants._library import override_neuron_kernel


def _hann_window(
    window_length,
    periodic=True,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
):
    window = torch.hann_window(window_length, periodic, dtype=dtype)
    return window.to(torch.device("neuron", torch.accelerator.current_device_index()))


def _hann_window_default(
    window_length,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
):
    return _hann_window(window_length, True, dtype=dtype, device=device)


override_neuron_kernel("hann_window", _hann_window_default)
override_neuron_kernel("hann_window.periodic", _hann_window)
