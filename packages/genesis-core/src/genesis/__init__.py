"""Genesis: a deep-learning framework written from scratch, with a PyTorch-like API.

``genesis`` (this package) is owned by genesis-core; genesis-nn, genesis-llm and
genesis-distributed add sub-packages (``genesis.nn``, ``genesis.models`` ...). Backends are
plugins loaded on first use of their device, never here.
"""

# Other distributions install sub-packages of `genesis` (possibly editable, from their own
# src/ folders): let Python look for them along the whole path. Spelled as pkgutil's documented
# one-liner so that static tools (griffe, for the API reference) see a namespace package, and
# `extend_path` does not become a public name of `genesis`.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from genesis import tensor_methods as _tensor_methods  # noqa: E402,F401  (attaches methods)
from genesis.autocast import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
from genesis.autograd import (  # noqa: E402
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from genesis.backends.cuda import (  # noqa: E402
    get_float32_matmul_precision,
    set_float32_matmul_precision,
)
from genesis.creation import (  # noqa: E402
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from genesis.device import device, get_default_device, set_default_device  # noqa: E402
from genesis.dtypes import (  # noqa: E402
    DType,
    bfloat16,
    bool_,
    can_cast,
    double,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int8,
    int16,
    int32,
    int64,
    long,
    promote_types,
    result_type,
    set_default_dtype,
    short,
    uint8,
)
from genesis.dtypes import float_ as float  # noqa: E402,A001
from genesis.dtypes import int_ as int  # noqa: E402,A001
from genesis.legacy_types import (  # noqa: E402
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)
from genesis.ops import *  # noqa: E402,F403
from genesis.ops.common import broadcast_shapes  # noqa: E402
from genesis.ops.einsum import einsum  # noqa: E402
from genesis.random import (  # noqa: E402
    Generator,
    default_generator,
    fork_rng,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from genesis.sampling import (  # noqa: E402
    bernoulli,
    multinomial,
    normal,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
)
from genesis.tensor import Size, Tensor  # noqa: E402

bool = bool_  # noqa: A001 - torch spells it genesis.bool
dtype = DType

from genesis import accelerator, autograd, backends, cuda, dispatch  # noqa: E402,F401
from genesis.compiler import compile  # noqa: E402,A001

__version__ = "0.1.0"


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a genesis Tensor.

    Args:
        obj: any object.

    Returns:
        A Python bool.
    """
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> int:
    """The number of elements of ``input``.

    Args:
        input: a tensor.

    Returns:
        The product of ``input.shape`` as a Python int.
    """
    return input.numel()


def set_num_threads(n: int) -> None:
    """Threads the CPU backend's kernels may use (torch's intra-op pool).

    Args:
        n: a positive number of threads.
    """
    device("cpu").backend.set_num_threads(n)


def get_num_threads() -> int:
    """Threads the CPU backend's kernels may use.

    Returns:
        An int.
    """
    return device("cpu").backend.get_num_threads()


def broadcast_tensors(*tensors) -> tuple:
    """Views of ``tensors`` expanded to their common broadcast shape.

    Args:
        *tensors: the tensors to broadcast together.

    Returns:
        A tuple of views, one per tensor, all of the broadcast shape.
    """
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


# Sub-packages that other distributions add to `genesis`, and the distribution to install.
_SUBPACKAGES = {"nn": "genesis-nn", "optim": "genesis-nn", "amp": "genesis-nn",
                "utils": "genesis-nn", "profiler": "genesis-nn", "distributions": "genesis-nn",
                "models": "genesis-llm",
                "distributed": "genesis-distributed"}


def __getattr__(name: str):
    # Checkpoints, test utilities and the other distributions' sub-packages are imported on
    # first use (as `torch.nn` is reachable after `import torch`), keeping `import genesis` lean.
    if name in ("save", "load"):
        from genesis import serialization

        return getattr(serialization, name)
    if name == "testing" or name in _SUBPACKAGES:
        import importlib

        try:
            return importlib.import_module(f"genesis.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"genesis.{name}":
                raise  # the sub-package is there but one of its own imports failed
            raise AttributeError(
                f"module 'genesis' has no attribute {name!r}: genesis.{name} is provided by "
                f"the {_SUBPACKAGES[name]} distribution, which is not installed "
                f"(pip install {_SUBPACKAGES[name]})", name=name) from None
    raise AttributeError(f"module 'genesis' has no attribute {name!r}")
