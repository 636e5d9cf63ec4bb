"""All ``genesis.nn`` layers; ``genesis.nn`` re-exports them."""

from genesis.nn.modules.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from genesis.nn.modules.attention import (
    MultiheadAttention,
)
from genesis.nn.modules.batchnorm import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
)
from genesis.nn.modules.container import (
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from genesis.nn.modules.conv import (
    Conv1d,
    Conv2d,
)
from genesis.nn.modules.distance import (
    CosineSimilarity,
    PairwiseDistance,
)
from genesis.nn.modules.dropout import (
    AlphaDropout,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
)
from genesis.nn.modules.flatten import (
    Flatten,
    Unflatten,
)
from genesis.nn.modules.linear import (
    Bilinear,
    Identity,
    Linear,
)
from genesis.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from genesis.nn.modules.module import (
    Module,
    RemovableHandle,
)
from genesis.nn.modules.normalization import (
    GroupNorm,
    LayerNorm,
    RMSNorm,
)
from genesis.nn.modules.pooling import (
    AdaptiveAvgPool2d,
    AvgPool2d,
    MaxPool2d,
)
from genesis.nn.modules.rnn import (
    GRU,
    LSTM,
    RNN,
    RNNBase,
)
from genesis.nn.modules.rnn_cell import (
    GRUCell,
    LSTMCell,
    RNNCell,
    RNNCellBase,
)
from genesis.nn.modules.sparse import (
    Embedding,
)
from genesis.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from genesis.nn.modules.upsampling import (
    ConvTranspose1d,
    ConvTranspose2d,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)

__all__ = [
    "Module",
    "RemovableHandle",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Identity",
    "Linear",
    "Bilinear",
    "Embedding",
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "CELU",
    "SELU",
    "GELU",
    "SiLU",
    "Mish",
    "Sigmoid",
    "Tanh",
    "Hardtanh",
    "Hardsigmoid",
    "Hardswish",
    "LogSigmoid",
    "Softplus",
    "Softsign",
    "Tanhshrink",
    "Threshold",
    "GLU",
    "PReLU",
    "Softmax",
    "LogSoftmax",
    "Softmin",
    "CosineSimilarity",
    "PairwiseDistance",
    "Flatten",
    "Unflatten",
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerDecoder",
    "Transformer",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "RNNBase",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCellBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "CrossEntropyLoss",
    "NLLLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "KLDivLoss",
]
