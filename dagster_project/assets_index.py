"""Every asset of the study, in pipeline order (derived stages append themselves here)."""

from assets.activations import activations
from assets.checkpoints import model_checkpoints
from assets.jacobians import jacobians
from assets.samples import samples

ALL_ASSETS = [model_checkpoints, samples, activations, jacobians]
