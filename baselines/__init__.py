"""The shipped baselines, package data of the wheel (``pytest_gpucomm.baselines``): ``--gpu-baseline=NAME``
looks here after the user's own baseline folder (``pytest_gpucomm.gate.names``)."""
