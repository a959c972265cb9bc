"""The model checkpoint: trained (tiny suite) or located (any HF model), then described.

The description comes from the config and the safetensors headers only: no weight is read here.
"""



import dagster as dg
import pyarrow as pa

from resdyn.dagster_project.asset_layer import MODEL, figure, partition_asset, table_output
from resdyn.figures import training_loss_figure

from .common import partition


@partition_asset(MODEL, group_name="inputs", settings=("dtype",), tables=[
    dg.AssetSpec("model_checkpoints", code_version="3", description="One row describing the checkpoint (from its "
                 "config and safetensors headers); trains the tiny suite member, imports a GGUF file or initialises a "
                 "null model on first use."),
    # skippable: only a tiny-suite member is trained here, so only it has a loss curve
    dg.AssetSpec("training_loss", code_version="1", skippable=True, description="The tiny suite member's training "
                 "loss per optimizer step up to this checkpoint (other models are trained elsewhere: no rows)."),
])
def model_checkpoints(context, settings, outputs, checkpoint, corpus):
    yield from _describe_checkpoint(context, checkpoint, corpus, settings, outputs)


def _describe_checkpoint(context, partition_checkpoint, corpus, settings, outputs):
    from resdyn.models.layerwise import describe_checkpoint  # torch and transformers: only where a step needs them
    from resdyn.models.tiny import checkpoint_step

    model, checkpoint = partition(context)
    spec, revision = partition_checkpoint.spec, partition_checkpoint.revision
    metadata = {}
    if spec.is_tiny:
        record = partition_checkpoint.train_tiny(
            corpus.training_text, progress=lambda step, loss: context.log.info(f"training {model}: step {step} loss {loss:.3f}"))
        curve = record["losses"][: checkpoint_step(checkpoint)]  # the loss up to this checkpoint
        losses = pa.table({"step": pa.array(range(len(curve)), pa.int32()), "loss": pa.array(curve, pa.float64()),
                           "training_corpus": [record["corpus"]] * len(curve)})
        loss_metadata = {}
        if curve:
            png = training_loss_figure(curve, outputs.figures,
                                       title=f"{model} training loss")
            loss_metadata.update(figure(png))
            loss_metadata["final_loss"] = dg.MetadataValue.float(curve[-1])
        # staged before model_checkpoints: a selection of this step is complete only with both
        yield table_output(losses, "training_loss", loss_metadata)
    origin = {}
    if spec.is_gguf:
        origin = partition_checkpoint.import_gguf(
            progress=lambda line: context.log.info(f"{context.partition_key}: {line}"))
        metadata.update({key: dg.MetadataValue.text(value) for key, value in origin.items() if value})
    described = describe_checkpoint(*partition_checkpoint.weights())
    config = described["text_config"]
    row = pa.table({
        "family": [spec.family], "source": [spec.source], "revision": [revision],
        "n_layers": pa.array([int(config.num_hidden_layers)], pa.int32()),
        "d_model": pa.array([int(config.hidden_size)], pa.int32()),
        "n_params": pa.array([int(described["n_params"])], pa.int64()),
        "stored_dtype": [",".join(sorted(described["stored_dtypes"]))], "dtype": [settings.dtype],
        "corpus": [corpus.analysis_text().label], "model_type": [described["config"].model_type],
        **{key: [origin.get(key, "")] for key in ("source_file", "source_sha256", "source_quantization",
                                                   "initialization")},
    })
    yield table_output(row, "model_checkpoints", {**metadata, "n_params": int(described["n_params"])})
