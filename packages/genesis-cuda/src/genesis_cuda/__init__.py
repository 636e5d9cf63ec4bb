"""genesis-cuda: the CUDA backend plugin of genesis.

Registered under the ``genesis.backends`` entry-point group as
``cuda = "genesis_cuda.backend:CUDABackend"``; genesis imports it the first time a ``cuda``
device is used. Importing this package touches no GPU and does not import Triton or
cuda-python: the driver is initialised when the first CUDA array is made.

Modules, one job each: ``driver`` (cuda-python, errors, contexts), ``device`` (current
device, lazy init, properties), ``streams`` (Stream, Event, current stream), ``allocator``
(the caching allocator's logic), ``memory`` (per-device allocators, memory statistics),
``array`` (``CudaArray``), ``transfer`` (host/device and peer copies), ``generator``
(Philox state), ``triton_hooks`` (Triton's stream, device and scratch allocator),
``backend`` (the contract), ``api`` (``genesis.cuda.*``), ``kernels`` (Triton kernels).
"""

__version__ = "0.1.0"
