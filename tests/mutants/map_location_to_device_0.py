"""An index-less map_location that loads onto device 0: neuron's deserializer places storages
saved or mapped as "neuron" on neuron:0 rather than the current device (torch's own fallback for
a device module without _utils._get_device_index). Right whenever device 0 is current."""

import torch


def _tag(obj):
    return None  # saving is untouched


def _deserialize(obj, location):
    if location == "neuron":
        return obj.to(device=torch.device("neuron", 0))
    return None


torch.serialization.register_package(5, _tag, _deserialize)
