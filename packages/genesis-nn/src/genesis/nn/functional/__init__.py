"""``genesis.nn.functional``: the stateless functions behind ``genesis.nn`` layers.

Conventionally imported as ``import genesis.nn.functional as F``.
"""

from genesis.nn.functional.activation import (
    celu,
    elu,
    elu_,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    hardtanh_,
    leaky_relu,
    leaky_relu_,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    relu_,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
    tanhshrink,
    threshold,
)
from genesis.nn.functional.attention import (
    multi_head_attention_forward,
    scaled_dot_product_attention,
)
from genesis.nn.functional.attention_decode import attention_decode
from genesis.nn.functional.conv import conv1d, conv2d
from genesis.nn.functional.conv_transpose import conv_transpose1d, conv_transpose2d
from genesis.nn.functional.distance import cosine_similarity, pairwise_distance
from genesis.nn.functional.dropout import (
    alpha_dropout,
    dropout,
    dropout1d,
    dropout2d,
    dropout3d,
)
from genesis.nn.functional.fused_llm import (
    add_rms_norm,
    apply_rotary_emb,
    swiglu,
    swiglu_linear,
)
from genesis.nn.functional.fused_loss import linear_cross_entropy
from genesis.nn.functional.interpolate import (
    interpolate,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from genesis.nn.functional.linear import bilinear, linear
from genesis.nn.functional.loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from genesis.nn.functional.normalization import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    normalize,
    rms_norm,
)
from genesis.nn.functional.padding import pad
from genesis.nn.functional.pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from genesis.nn.functional.sparse import embedding, one_hot
