"""The model checkpoint: trained (tiny suite), imported (GGUF) or located (any HF model), then described.

The description comes from the config and the safetensors headers only: no weight is read here.
"""

from __future__ import annotations

import pyarrow as pa

from resdyn.figures import training_loss_figure
from resdyn.stages.result import Figure, StageResult


def model_checkpoints(settings, tools, checkpoint, corpus) -> StageResult:
    """One row describing the checkpoint (``checkpoint``: its registry entry ``spec``, ``revision``, ``weights()``,
    ``train_tiny``, ``import_gguf``; ``corpus``: the analysis and training texts); a tiny-suite member's training
    loss up to this checkpoint beside it (other models are trained elsewhere: no ``training_loss`` table)."""
    from resdyn.models.layerwise import describe_checkpoint  # torch and transformers: only where a step needs them
    from resdyn.models.tiny import checkpoint_step

    spec, revision = checkpoint.spec, checkpoint.revision
    tables, metadata = {}, {"model_checkpoints": {}}
    if spec.is_tiny:
        record = checkpoint.train_tiny(
            corpus.training_text, progress=lambda step, loss: tools.log(f"training {tools.model}: step {step} loss {loss:.3f}"))
        curve = record["losses"][: checkpoint_step(tools.checkpoint)]  # the loss up to this checkpoint
        tables["training_loss"] = pa.table({"step": pa.array(range(len(curve)), pa.int32()),
                                            "loss": pa.array(curve, pa.float64()),
                                            "training_corpus": [record["corpus"]] * len(curve)})
        metadata["training_loss"] = ({"figure": Figure(training_loss_figure(curve, tools.figures,
                                                                            title=f"{tools.model} training loss")),
                                      "final_loss": float(curve[-1])} if curve else {})
    origin = {}
    if spec.is_gguf:
        origin = checkpoint.import_gguf(progress=tools.log)
        metadata["model_checkpoints"].update({key: value for key, value in origin.items() if value})
    described = describe_checkpoint(*checkpoint.weights())
    config = described["text_config"]
    tables["model_checkpoints"] = pa.table({
        "family": [spec.family], "source": [spec.source], "revision": [revision],
        "n_layers": pa.array([int(config.num_hidden_layers)], pa.int32()),
        "d_model": pa.array([int(config.hidden_size)], pa.int32()),
        "n_params": pa.array([int(described["n_params"])], pa.int64()),
        "stored_dtype": [",".join(sorted(described["stored_dtypes"]))], "dtype": [settings.dtype],
        "corpus": [corpus.analysis_text().label], "model_type": [described["config"].model_type],
        **{key: [origin.get(key, "")] for key in ("source_file", "source_sha256", "source_quantization",
                                                   "initialization")},
    })
    metadata["model_checkpoints"]["n_params"] = int(described["n_params"])
    return StageResult(tables=tables, metadata=metadata)


__all__ = ["model_checkpoints"]
