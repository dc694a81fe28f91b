"""conformance: check any PyTorch backend against identical semantics.

Run it as ``pytest --pyargs conformance --backend NAME`` (the pytest plugin is registered through
the ``pytest11`` entry point) or as ``conformance --backend NAME``. Each ``test_<area>.py`` module
is one semantic area; each backend has a manifest in ``backends/NAME.toml`` that declares its
capabilities and its known failures.

This package never imports device_agnostic: it finds every backend through torch.
"""
