"""``genesis.nn``: modules, parameters, ``functional``, ``init`` and ``utils``.

Example::

    >>> import genesis
    >>> import genesis.nn as nn
    >>> import genesis.nn.functional as F
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> F.softmax(model(genesis.randn(3, 4)), dim=-1).shape
    genesis.Size([3, 2])
"""

# genesis-distributed adds ``genesis.nn.parallel`` (possibly editable, from its own src/ folder):
# let Python look for sub-packages along the whole path, as ``genesis`` itself does.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from genesis.nn.parameter import Buffer, Parameter  # noqa: E402  # isort: skip
from genesis.nn import functional, init  # noqa: E402  # isort: skip
from genesis.nn.modules import *  # noqa: E402,F403 - every layer (genesis.nn.modules.__all__)

from genesis.nn import utils  # noqa: E402  # isort: skip
