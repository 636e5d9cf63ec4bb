"""``genesis.nn``: modules, parameters, ``functional``, ``init`` and ``utils``.

Example::

    >>> import genesis
    >>> import genesis.nn as nn
    >>> import genesis.nn.functional as F
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> F.softmax(model(genesis.randn(3, 4)), dim=-1).shape
    genesis.Size([3, 2])
"""

from genesis.nn.parameter import Buffer, Parameter  # isort: skip
from genesis.nn import functional, init  # isort: skip
from genesis.nn.modules import *  # noqa: F403 - every layer (genesis.nn.modules.__all__)

from genesis.nn import parallel, utils  # isort: skip
