"""``genesis.optim``: optimizers and learning-rate schedulers (PyTorch's API and numerics)."""

from genesis.optim import lr_scheduler
from genesis.optim.adadelta import Adadelta
from genesis.optim.adagrad import Adagrad
from genesis.optim.adam import Adam
from genesis.optim.adamax import Adamax
from genesis.optim.adamw import AdamW
from genesis.optim.asgd import ASGD
from genesis.optim.lbfgs import LBFGS
from genesis.optim.nadam import NAdam
from genesis.optim.optimizer import Optimizer
from genesis.optim.radam import RAdam
from genesis.optim.rmsprop import RMSprop
from genesis.optim.rprop import Rprop
from genesis.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler",
           "Adadelta", "Adamax", "NAdam", "RAdam", "Rprop", "ASGD", "LBFGS"]
