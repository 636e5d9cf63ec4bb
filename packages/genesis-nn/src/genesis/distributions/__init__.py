"""``genesis.distributions``: probability distributions with sampling, log-densities and
KL divergences, as ``torch.distributions`` (``Normal``, ``Uniform``, ``Bernoulli``,
``Categorical``).

Shipped by genesis-nn; built from core tensor ops only. ``rsample`` (where a distribution
has one) is differentiable through the reparameterisation; random draws come from
genesis's generators (reproducible under ``genesis.manual_seed``, not torch's numbers).
"""

from genesis.distributions import constraints
from genesis.distributions.bernoulli import Bernoulli
from genesis.distributions.categorical import Categorical
from genesis.distributions.distribution import Distribution
from genesis.distributions.kl import kl_divergence, register_kl
from genesis.distributions.normal import Normal
from genesis.distributions.uniform import Uniform

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal", "Uniform", "constraints",
           "kl_divergence", "register_kl"]
