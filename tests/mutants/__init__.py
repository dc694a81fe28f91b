"""Deliberately broken backends: each module, loaded into a conformance run with
``-p mutants.<name>``, breaks the neuron backend in one way the suite must catch.

They wrap the real backend (torch.library overrides of its kernels, or wrappers around its
Python API); tests/test_conformance_mutants.py proves each one makes a conformance test fail.
"""
