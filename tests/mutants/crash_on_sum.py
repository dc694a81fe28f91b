"""A backend that crashes the interpreter: sum on neuron aborts the process."""

import os

from mutants._library import override_neuron_kernel


def _sum(self, *args, **kwargs):
    os.abort()


override_neuron_kernel("sum", _sum)
