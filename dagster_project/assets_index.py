"""Every asset of the study, in pipeline order."""

from assets.checkpoints import model_checkpoints
from assets.coupling import coupling_tests, unit_amplification
from assets.measurements import measurements
from assets.per_sample import layer_metrics_per_sample
from assets.report import STUDY_ASSET_KEYS, study
from assets.samples import samples
from assets.spectra import spectral_analysis
from assets.topology import community_tables, graph_edges
from assets.transient import transient_analysis

ALL_ASSETS = [model_checkpoints, samples, measurements, spectral_analysis, transient_analysis, layer_metrics_per_sample, graph_edges,
              community_tables, unit_amplification, coupling_tests]

STUDY_ASSETS = [study]  # unpartitioned, across every complete partition
__all__ = ["ALL_ASSETS", "STUDY_ASSETS", "STUDY_ASSET_KEYS"]
