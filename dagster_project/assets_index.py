"""Every asset of the study, in pipeline order."""

from resdyn.assets.checkpoints import model_checkpoints
from resdyn.assets.comparisons import checkpoint_comparison_figures
from resdyn.assets.coupling import community_coupling, coupling_tests, unit_amplification
from resdyn.assets.measurements import measurements
from resdyn.assets.per_sample import layer_metrics_per_sample
from resdyn.assets.report import study
from resdyn.assets.samples import samples
from resdyn.assets.sampling import sampling_intervals
from resdyn.assets.spectra import spectral_analysis
from resdyn.assets.topology import community_tables, graph_edges
from resdyn.assets.transient import transient_analysis

# partitioned assets (PartitionAsset: their definitions are made per configuration, launch.study_assets)
PARTITION_ASSETS = [model_checkpoints, samples, measurements, spectral_analysis, transient_analysis,
                    layer_metrics_per_sample, sampling_intervals, graph_edges, community_tables, unit_amplification,
                    coupling_tests, community_coupling]
ALL_ASSETS = [asset.definition() for asset in PARTITION_ASSETS]  # without step tags: keys, groups, selections

STUDY_ASSETS = [checkpoint_comparison_figures, study]  # unpartitioned (group study), across the published partitions
__all__ = ["ALL_ASSETS", "PARTITION_ASSETS", "STUDY_ASSETS"]
