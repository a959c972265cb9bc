"""The analysis samples: seeded windows of the model's own tokens."""


import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn.corpus import beginning_of_sequence, load_wikitext, sample_windows, tokenize
from resdyn.dagster_project.partition_assets import ANALYSIS, partition_asset
from resdyn.dagster_project.store.io_manager import table_output

from .common import checkpoint_source, partition


@partition_asset(ANALYSIS, code_version="3", group_name="inputs", deps=["model_checkpoints"],
          description="WikiText-2 test windows (token ids kept) and their analysed positions.")
def samples(context, settings, warehouse):
    yield _draw_samples(context, warehouse, settings)


def _draw_samples(context, warehouse, settings) -> dg.Output:
    from transformers import AutoTokenizer

    from resdyn.models.checkpoint import locate_checkpoint

    model, checkpoint = partition(context)
    source, revision = checkpoint_source(warehouse, model, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(locate_checkpoint(source, revision))
    corpus = load_wikitext("test", directory=warehouse.wikitext_directory or None)
    prefix = beginning_of_sequence(tokenizer) if settings.bos == "auto" else None
    windows = sample_windows(tokenize(corpus.text, tokenizer), n_samples=settings.n_samples,
                             sequence_length=settings.sequence_length, seed=settings.seed,
                             positions=settings.positions, warmup=settings.warmup, prefix=prefix)
    positions = np.asarray(windows[0].positions, dtype=np.int32)
    tokens = np.asarray([w.token_ids for w in windows], dtype=np.int32)  # (n, T)
    repeat = len(positions)
    table = pa.table({
        "sample_id": pa.array(np.repeat(np.asarray([w.sample_id for w in windows], np.int32), repeat)),
        "token_ids": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(tokens, repeat, axis=0).ravel()),
                                                       tokens.shape[1]).cast(pa.list_(pa.int32())),
        "position": pa.array(np.tile(positions, len(windows))),
        "corpus": pa.repeat(pa.scalar(corpus.label), len(windows) * repeat),
        "seed": pa.repeat(pa.scalar(settings.seed, pa.int32()), len(windows) * repeat),
    })
    return table_output(table, metadata={"corpus": corpus.label, "n_samples": len(windows),
                                         "beginning_of_sequence": "none" if prefix is None else int(prefix)})
