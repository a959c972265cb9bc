"""The analysis samples: seeded windows of the model's own tokens."""


import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn.corpus import beginning_of_sequence, sample_windows, tokenize
from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset, table_output


@partition_asset(ANALYSIS, code_version="3", group_name="inputs",
                 settings=("bos", "n_samples", "positions", "seed", "sequence_length", "warmup"), deps=["model_checkpoints"],
          description="WikiText-2 test windows (token ids kept) and their analysed positions.")
def samples(context, settings, checkpoint, corpus):
    yield _draw_samples(context, checkpoint, corpus, settings)


def _draw_samples(context, checkpoint, corpus, settings) -> dg.Output:
    from transformers import AutoTokenizer

    from resdyn.models.checkpoint import locate_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(locate_checkpoint(*checkpoint.weights()))
    corpus = corpus.analysis_text()
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
