"""A toy genesis backend plugin: device type ``'toy'``, kernels borrowed from the CPU backend."""
