"""A byte-level tokenizer for the tiny model suite: one token per UTF-8 byte.

It is a genuine Hugging Face fast tokenizer (byte-level BPE with an empty merge list), so it
is saved by ``save_pretrained`` and reloaded by ``AutoTokenizer.from_pretrained`` like any
other; nothing about the tiny suite is special-cased downstream.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"
BYTE_VOCABULARY_SIZE = 256


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (Radford et al. 2019)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {byte: chr(code) for byte, code in zip(printable, characters)}


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Token id = byte value (0..255); id 256 is the end-of-text token."""
    vocabulary = {character: byte for byte, character in byte_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    fast.add_special_tokens({"eos_token": END_OF_TEXT, "bos_token": END_OF_TEXT, "pad_token": END_OF_TEXT})
    return fast
