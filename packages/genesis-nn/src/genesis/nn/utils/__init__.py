"""``genesis.nn.utils``: gradient clipping, parameter/vector conversion and ``rnn`` (packed
sequences)."""

from genesis.nn.utils import rnn
from genesis.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from genesis.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
