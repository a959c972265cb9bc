import logging
import os

import numpy as np
import pytest

from resdyn import corpus
from resdyn.models.byte_tokenizer import build_byte_tokenizer


@pytest.mark.skipif(not os.environ.get("RESDYN_WIKITEXT_DIR"), reason="shared WikiText-2 copy not present")
def test_reads_the_local_wikitext_file():
    text = corpus.load_wikitext("test")
    assert text.label == "wikitext-2-raw-v1:test:local"
    expected = open(os.path.join(os.environ["RESDYN_WIKITEXT_DIR"], "wiki.test.raw"), encoding="utf-8").read()
    assert text.text == expected


def test_falls_back_loudly_when_wikitext_is_absent(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RESDYN_WIKITEXT_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING):
        text = corpus.load_wikitext("test", use_hub=False)
    assert text.label == corpus.FALLBACK_LABEL
    assert "NOT WIKITEXT-2" in caplog.text
    assert len(text.text) > 100_000


def test_sample_windows_are_seeded_and_keep_their_tokens(fresh_seed):
    tokens = np.arange(5000)
    first = corpus.sample_windows(tokens, n_samples=20, sequence_length=16, seed=fresh_seed)
    again = corpus.sample_windows(tokens, n_samples=20, sequence_length=16, seed=fresh_seed)
    other = corpus.sample_windows(tokens, n_samples=20, sequence_length=16, seed=fresh_seed + 1)
    assert first == again and first != other
    for sample in first:
        assert list(sample.token_ids) == list(range(sample.token_ids[0], sample.token_ids[0] + 16))
        assert sample.positions == (15,)
    assert len({sample.token_ids[0] for sample in first}) == 20
    everything = corpus.sample_windows(tokens, n_samples=2, sequence_length=16, seed=0, positions="all", warmup=4)
    assert everything[0].positions == tuple(range(4, 16))
    with pytest.raises(ValueError, match="too few"):
        corpus.sample_windows(tokens[:20], n_samples=10, sequence_length=16, seed=0)


def test_byte_tokenizer_round_trips_text(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = build_byte_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "Hé said: 'x² ≠ y' \n"
    ids = reloaded(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert reloaded.decode(ids) == text


def test_windows_start_with_the_beginning_of_sequence_token_where_the_tokenizer_adds_one(fresh_seed):
    """A tokenizer whose post-processor adds BOS (as Gemma's and Llama 3's do) gives its id; the byte tokenizer adds
    none. With a prefix every window is BOS + sequence_length - 1 consecutive text tokens, the last one analysed."""
    from tokenizers import processors

    plain = build_byte_tokenizer()
    assert corpus.beginning_of_sequence(plain) is None
    with_bos = build_byte_tokenizer()
    bos = with_bos.convert_tokens_to_ids(with_bos.bos_token)
    with_bos.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{with_bos.bos_token} $A", special_tokens=[(with_bos.bos_token, bos)])
    assert with_bos("ab")["input_ids"] == [bos, ord("a"), ord("b")]
    assert corpus.beginning_of_sequence(with_bos) == bos
    tokens = np.arange(1000, 6000)
    windows = corpus.sample_windows(tokens, n_samples=12, sequence_length=16, seed=fresh_seed, prefix=7)
    for sample in windows:
        assert sample.token_ids[0] == 7 and len(sample.token_ids) == 16 and sample.positions == (15,)
        assert list(sample.token_ids[1:]) == list(range(sample.token_ids[1], sample.token_ids[1] + 15))
