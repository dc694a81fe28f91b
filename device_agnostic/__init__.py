"""device_agnostic: make PyTorch code run with identical semantics on any accelerator.

Subpackages:

- :mod:`device_agnostic.neuron`: the reference PrivateUse1 backend "neuron", an AWS NeuronCore
  emulated on host memory. ``import torch`` loads it through the ``torch.backends`` entry point.
"""
