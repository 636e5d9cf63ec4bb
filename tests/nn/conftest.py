"""The ``device`` fixture (``"cpu"``, and ``"cuda:0"`` marked ``cuda``): one definition, in
``tests/support/device_params.py``."""

from device_params import device  # noqa: F401 - the fixture, registered by being imported
