"""Stage 2: the analysis samples: seeded windows of the model's own tokens."""


import dagster as dg
import pyarrow as pa
from transformers import AutoTokenizer

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.corpus import load_wikitext, sample_windows, tokenize

from .checkpoints import model_checkpoints
from .common import PARTITIONS, checkpoint_source, partition, table_metadata


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="inputs", deps=[model_checkpoints],
          description="WikiText-2 test windows (token ids kept) and their analysed positions.")
def samples(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
            settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    source, revision = checkpoint_source(warehouse, model, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(source, revision=revision)
    corpus = load_wikitext("test")
    windows = sample_windows(tokenize(corpus.text, tokenizer), n_samples=settings.n_samples,
                             sequence_length=settings.sequence_length, seed=settings.seed,
                             positions=settings.positions, warmup=settings.warmup)
    rows = [(s.sample_id, list(s.token_ids), t) for s in windows for t in s.positions]
    table = pa.table({
        "sample_id": pa.array([r[0] for r in rows], pa.int32()),
        "token_ids": pa.array([r[1] for r in rows], pa.list_(pa.int32())),
        "position": pa.array([r[2] for r in rows], pa.int32()),
        "corpus": [corpus.label] * len(rows),
        "seed": pa.array([settings.seed] * len(rows), pa.int32()),
    })
    path = warehouse.open().write("samples", model, checkpoint, table)
    return dg.MaterializeResult(metadata={**table_metadata(table, path),
                                          "corpus": corpus.label, "n_samples": len(windows)})
