"""Text corpora and the token windows that become analysis samples.

WikiText-2 raw (Merity et al. 2016) is read, in order of preference, from

1. a local directory named by ``RESDYN_WIKITEXT_DIR`` holding ``wiki.{split}.raw``;
2. ``datasets.load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1")``;
3. a built-in fallback that ships with Python (``pydoc_data.topics``), logged loudly and labelled
   ``corpus="fallback:pydoc_data.topics"`` so no result is ever mistaken for WikiText-2.

Training text for the tiny suite comes from ``RESDYN_WIKITEXT_TOKENIZED_DIR`` (``valid.txt``),
then the same chain as above on the validation split.

A sample is a window of ``sequence_length`` consecutive tokens of the model's own tokenizer,
starting at an offset drawn without replacement by ``numpy.random.default_rng(seed)``; it keeps
its token ids so that every downstream number can be recomputed from the warehouse alone.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .models.hub import datasets_hub_is_reachable

log = logging.getLogger(__name__)

WIKITEXT_DIR_VARIABLE = "RESDYN_WIKITEXT_DIR"
TOKENIZED_DIR_VARIABLE = "RESDYN_WIKITEXT_TOKENIZED_DIR"
WIKITEXT_HUB_ID = ("Salesforce/wikitext", "wikitext-2-raw-v1")
FALLBACK_LABEL = "fallback:pydoc_data.topics"


@dataclass(frozen=True)
class Corpus:
    """A text and the label that says where it came from (stored as the ``corpus`` column)."""

    text: str
    label: str


@dataclass(frozen=True)
class Sample:
    """One analysis window: its id, its token ids, and the analysed positions within it."""

    sample_id: int
    token_ids: tuple[int, ...]
    positions: tuple[int, ...]


def _read_local(directory: Path, split: str) -> Corpus | None:
    path = directory / f"wiki.{split}.raw"
    if not path.is_file():
        log.warning("%s=%s has no %s; trying the next corpus source", WIKITEXT_DIR_VARIABLE, directory, path.name)
        return None
    return Corpus(path.read_text(encoding="utf-8"), f"wikitext-2-raw-v1:{split}:local")


def _read_hub(split: str) -> Corpus | None:
    try:
        import datasets

        rows = datasets.load_dataset(*WIKITEXT_HUB_ID, split={"valid": "validation"}.get(split, split))
    except Exception as error:  # noqa: BLE001 - any failure means "not reachable": fall through
        log.warning("datasets.load_dataset%s failed (%s); trying the next corpus source", WIKITEXT_HUB_ID, error)
        return None
    return Corpus("".join(rows["text"]), f"wikitext-2-raw-v1:{split}:datasets")


def fallback_corpus() -> Corpus:
    """Python's own help-topic texts: always present, clearly not WikiText-2."""
    from pydoc_data.topics import topics

    log.warning(
        "USING THE BUILT-IN FALLBACK CORPUS (%s), NOT WIKITEXT-2. Set %s to a directory holding "
        "wiki.test.raw to analyse WikiText-2.",
        FALLBACK_LABEL,
        WIKITEXT_DIR_VARIABLE,
    )
    return Corpus("\n\n".join(topics[key] for key in sorted(topics)), FALLBACK_LABEL)


def load_wikitext(split: str = "test", *, use_hub: bool = True, directory: str | None = None) -> Corpus:
    """WikiText-2 raw ``split`` through the local -> datasets -> fallback chain (cached per process).

    ``directory`` holds ``wiki.<split>.raw``; None: the one RESDYN_WIKITEXT_DIR names (the platform
    passes its configured directory; the variable is for using this package on its own)."""
    return _load_wikitext(split, use_hub, directory or os.environ.get(WIKITEXT_DIR_VARIABLE) or None)


@functools.lru_cache(maxsize=8)
def _load_wikitext(split: str, use_hub: bool, directory: str | None) -> Corpus:
    if directory:
        corpus = _read_local(Path(directory), split)
        if corpus is not None:
            return corpus
    else:
        log.warning("%s is not set; trying datasets", WIKITEXT_DIR_VARIABLE)
    if use_hub and datasets_hub_is_reachable():
        corpus = _read_hub(split)
        if corpus is not None:
            return corpus
    elif use_hub:
        log.warning("the hub is not reachable (or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set); skipping datasets")
    return fallback_corpus()


def load_training_text(*, use_hub: bool = True, directory: str | None = None,
                       raw_directory: str | None = None) -> Corpus:
    """Training text for the tiny suite: the tokenized WikiText-2 validation split in ``directory`` (None:
    RESDYN_WIKITEXT_TOKENIZED_DIR) if there, else the raw one (:func:`load_wikitext` in ``raw_directory``)."""
    directory = directory or os.environ.get(TOKENIZED_DIR_VARIABLE)
    if directory and (Path(directory) / "valid.txt").is_file():
        return Corpus((Path(directory) / "valid.txt").read_text(encoding="utf-8"), "wikitext-2-v1:valid:local")
    return load_wikitext("valid", use_hub=use_hub, directory=raw_directory)


def sample_windows(
    token_ids: np.ndarray,
    *,
    n_samples: int,
    sequence_length: int,
    seed: int,
    positions: str = "last",
    warmup: int = 0,
    prefix: int | None = None,
) -> list[Sample]:
    """Draw ``n_samples`` distinct windows of ``sequence_length`` tokens, reproducibly.

    ``positions="last"`` analyses the last token of each window; ``positions="all"`` analyses
    every position from ``warmup`` on (earlier ones have too little context to be typical).
    With ``prefix`` (a beginning-of-sequence id, :func:`beginning_of_sequence`) each window is that id
    followed by ``sequence_length - 1`` text tokens, as the model saw text in training.
    """
    if positions not in ("last", "all"):
        raise ValueError(f"positions must be 'last' or 'all', not {positions!r}")
    if positions == "all" and not 0 <= warmup < sequence_length:
        raise ValueError(f"warmup must lie in [0, sequence_length), got {warmup}")
    text_length = sequence_length - (prefix is not None)
    n_starts = len(token_ids) - text_length + 1
    if n_starts < n_samples:
        raise ValueError(
            f"the corpus has {len(token_ids)} tokens: too few for {n_samples} windows of {sequence_length}"
        )
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(n_starts, size=n_samples, replace=False))
    analysed = (sequence_length - 1,) if positions == "last" else tuple(range(warmup, sequence_length))
    head = () if prefix is None else (int(prefix),)
    return [
        Sample(index, head + tuple(int(t) for t in token_ids[start : start + text_length]), analysed)
        for index, start in enumerate(starts)
    ]


def beginning_of_sequence(tokenizer) -> int | None:
    """The id a tokenizer puts before every text when it adds its special tokens (Gemma's and Llama 3's BOS), or
    None when it adds none before the text (GPT-2-style tokenizers, the tiny suite's bytes). A model trained with
    a BOS at position 0 is off its training distribution without one (Gemma 3 270M: 7.95 nats per token on
    WikiText windows without, 4.22 with)."""
    plain = list(tokenizer("a b", add_special_tokens=False)["input_ids"])
    special = list(tokenizer("a b")["input_ids"])
    if len(special) > len(plain) and special[len(special) - len(plain):] == plain and len(special) - len(plain) == 1:
        return int(special[0])
    return None


def tokenize(text: str, tokenizer) -> np.ndarray:
    """The whole text as one id array, without special tokens (windows cut across lines)."""
    return np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
