"""``genesis.optim``: optimizers and learning-rate schedulers (PyTorch's API and numerics)."""

from genesis.optim import lr_scheduler
from genesis.optim.adagrad import Adagrad
from genesis.optim.adam import Adam
from genesis.optim.adamw import AdamW
from genesis.optim.optimizer import Optimizer
from genesis.optim.rmsprop import RMSprop
from genesis.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
