"""conformance: check any PyTorch backend against identical semantics.

Run it as ``pytest --pyargs conformance --conformance-backend NAME`` (the pytest plugin is
registered through the ``pytest11`` entry point) or as ``conformance --backend NAME``. Each
``test_<area>.py`` module is one semantic area; each backend has a manifest in
``backends/NAME.toml`` (or in a folder given with ``--manifest-dir``) that declares its
capabilities and its known failures; ``conformance init NAME`` probes a new backend and writes one
for review.

This package never imports device_agnostic: it finds every backend through torch.
"""
