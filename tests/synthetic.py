"""Synthetic residual streams with planted communities and boundary units (shared by tests)."""

import itertools

import numpy as np


def planted_activations(rng, n_communities=4, size=20, n_observations=600, n_boundary=0, strength=1.0):
    """Units load on one community factor; boundary units (the last ``n_boundary``) load on two.

    Boundary units go through the community pairs in turn (shuffled), so no pair gets most of them: a pair
    holding many boundary units makes them a clique of their own rather than mixers between two communities.
    """
    n_units = n_communities * size + n_boundary
    factors = rng.normal(size=(n_observations, n_communities))
    truth = np.repeat(np.arange(n_communities), size)
    loadings = np.zeros((n_units, n_communities))
    loadings[np.arange(n_communities * size), truth] = strength
    pairs = list(itertools.combinations(range(n_communities), 2))
    order = rng.permutation(len(pairs))
    for j in range(n_boundary):
        loadings[n_communities * size + j, list(pairs[order[j % len(pairs)]])] = strength / np.sqrt(2)
    activations = factors @ loadings.T + rng.normal(size=(n_observations, n_units))
    return activations, truth


def jacobian_with_boundary_gain(rng, is_boundary, gain):
    """I + small noise, with boundary columns scaled by ``gain`` (>1 amplifies, <1 suppresses)."""
    d = len(is_boundary)
    jacobian = np.eye(d) + 0.05 * rng.normal(size=(d, d))
    jacobian[:, is_boundary] *= gain
    return jacobian
