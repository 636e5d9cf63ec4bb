"""``genesis.nn.parallel``: where torch programs import ``DistributedDataParallel`` from.

This sub-package of ``genesis.nn`` is shipped by genesis-distributed (genesis-nn does not
depend on it): ``from genesis.nn.parallel import DistributedDataParallel`` gives
``genesis.distributed.DistributedDataParallel`` wherever genesis-distributed is installed.

Example:
    >>> from genesis.nn.parallel import DistributedDataParallel as DDP
    >>> model = DDP(model)   # in a process group started by torchrun
"""

from genesis.distributed.ddp import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
