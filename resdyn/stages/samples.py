"""The analysis samples: seeded windows of the model's own tokens (resdyn.corpus)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from resdyn.corpus import beginning_of_sequence, sample_windows, tokenize
from resdyn.stages.result import StageResult


def samples(settings, checkpoint, corpus) -> StageResult:
    """``settings.n_samples`` windows of ``settings.sequence_length`` tokens of the analysis text (seeded by
    ``settings.seed``), tokenized by the checkpoint's own tokenizer, with their analysed positions."""
    from transformers import AutoTokenizer

    from resdyn.models.checkpoint import locate_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(locate_checkpoint(*checkpoint.weights()))
    text = corpus.analysis_text()
    prefix = beginning_of_sequence(tokenizer) if settings.bos == "auto" else None
    windows = sample_windows(tokenize(text.text, tokenizer), n_samples=settings.n_samples,
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
        "corpus": pa.repeat(pa.scalar(text.label), len(windows) * repeat),
        "seed": pa.repeat(pa.scalar(settings.seed, pa.int32()), len(windows) * repeat),
    })
    return StageResult(tables={"samples": table}, metadata={"samples": {
        "corpus": text.label, "n_samples": len(windows),
        "beginning_of_sequence": "none" if prefix is None else int(prefix)}})


__all__ = ["samples"]
