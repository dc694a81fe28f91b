"""A loss kernel that ignores an optional argument: nll_loss on neuron (so cross_entropy with
class indices) drops the class weight=, as a kernel written for the plain call would. OpInfo
lists its weighted samples after the plain ones; a test of the first samples never reaches
them."""

import torch

from mutants._library import override_neuron_kernel


def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    output, total_weight = torch.ops.aten.nll_loss_forward(
        self.cpu(), target.cpu(), None, reduction, ignore_index
    )
    return output.to(self.device), total_weight.to(self.device)


override_neuron_kernel("nll_loss_forward", _nll_loss_forward)
