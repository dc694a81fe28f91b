"""Repeated indices: scatter_add on neuron reads each destination, adds its source and writes
back without atomics, so of several sources aimed at one element only one survives (a
race every parallel scatter kernel must handle). Only repeated indices show it."""

from mutants._library import override_neuron_kernel


def _scatter_add(self, dim, index, src):
    host, indices = self.cpu(), index.cpu()
    used = src.cpu()[tuple(slice(0, side) for side in indices.shape)]
    # Every source reads the value before any write: duplicates overwrite each other.
    return host.scatter(dim, indices, host.gather(dim, indices) + used).to(self.device)


override_neuron_kernel("scatter_add", _scatter_add)
