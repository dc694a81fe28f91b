"""A backend that hangs: sum on neuron never returns."""

import time

from mutants._library import override_neuron_kernel


def _sum(self, *args, **kwargs):
    while True:
        time.sleep(1)


override_neuron_kernel("sum", _sum)
