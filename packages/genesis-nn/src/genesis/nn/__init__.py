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
from genesis.nn.modules import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    AdaptiveAvgPool2d,
    AlphaDropout,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    BCELoss,
    BCEWithLogitsLoss,
    Bilinear,
    Conv1d,
    Conv2d,
    CosineSimilarity,
    CrossEntropyLoss,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    Embedding,
    Flatten,
    GroupNorm,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    HuberLoss,
    Identity,
    KLDivLoss,
    L1Loss,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSigmoid,
    LogSoftmax,
    MaxPool2d,
    Mish,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    NLLLoss,
    PairwiseDistance,
    ParameterDict,
    ParameterList,
    PReLU,
    ReLU,
    ReLU6,
    RemovableHandle,
    RMSNorm,
    Sequential,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    Unflatten,
)

from genesis.nn import utils  # isort: skip
