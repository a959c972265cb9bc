"""Stage 1: the model checkpoint: trained (tiny suite) or located (any HF model), then described."""


import json

import dagster as dg
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.corpus import load_training_text, load_wikitext
from resdyn.figures import training_loss_figure
from resdyn.models.tiny import checkpoint_step, ensure_tiny_checkpoint

from .common import PARTITIONS, figure, load_partition_model, partition, table_metadata


def _training_text() -> tuple[str, str]:
    corpus = load_training_text()
    return corpus.text, corpus.label


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="inputs",
          description="One row describing the checkpoint; trains the tiny suite member on first use.")
def model_checkpoints(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                      settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    spec, revision = warehouse.registry().resolve(context.partition_key)
    metadata = {}
    if spec.is_tiny:
        directory = ensure_tiny_checkpoint(
            spec.family, store.models_directory / model, checkpoint, save_checkpoints=list(spec.checkpoints),
            text_loader=_training_text,
            progress=lambda step, loss: context.log.info(f"training {model}: step {step} loss {loss:.3f}"),
        )
        record = json.loads((directory.parent / "training.json").read_text())
        curve = record["losses"][: checkpoint_step(checkpoint)]  # the loss up to this checkpoint
        losses = pa.table({"step": pa.array(range(len(curve)), pa.int32()), "loss": pa.array(curve, pa.float64()),
                           "training_corpus": [record["corpus"]] * len(curve)})
        store.write("training_loss", model, checkpoint, losses)
        if curve:
            png = training_loss_figure(curve, store.artefact_directory("figures", model, checkpoint),
                                       title=f"{model} training loss")
            metadata.update(figure(png))
            metadata["final_loss"] = dg.MetadataValue.float(curve[-1])
    loaded = load_partition_model(warehouse, settings, model, checkpoint)
    config = loaded.model.config
    row = pa.table({
        "family": [spec.family], "source": [spec.source], "revision": [revision],
        "n_layers": [int(config.num_hidden_layers)], "d_model": [int(config.hidden_size)],
        "n_params": [int(loaded.n_params)], "dtype": [loaded.dtype], "corpus": [load_wikitext("test").label],
        "model_type": [config.model_type],
    })
    path = store.write("model_checkpoints", model, checkpoint, row)
    return dg.MaterializeResult(metadata={**table_metadata(row, path), **metadata})
