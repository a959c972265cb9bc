"""The null model of a trained checkpoint: the same architecture with freshly initialised weights.

The study separates what an architecture does from what training installs by analysing the
untrained network beside the trained one (PAPER.md: OLMo step 0). For a model published without
its step-0 checkpoint, :func:`initialised_checkpoint` makes one: the trained checkpoint's
``config.json`` instantiated by transformers' own ``from_config``, whose ``_init_weights`` draws
every linear and embedding weight from N(0, ``initializer_range``^2) and sets norm weights to their
identity value, under ``torch.manual_seed(seed)``. A GGUF file does not carry ``initializer_range``
(the imported config has transformers' default 0.02): the registry gives the model's published
value (``init_config``; SmolLM2-135M: 1/24 = 0.0417).
Saved once with the trained checkpoint's tokenizer; ``resdyn_null_model.json`` records how.
The model is materialized whole once (float32), which bounds it to models that fit in memory.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

NULL_MODEL_RECORD = "resdyn_null_model.json"
NULL_MODEL_SEED = 0
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt")


def read_null_model_record(directory: str | os.PathLike, name: str = NULL_MODEL_RECORD) -> dict | None:
    """The JSON record ``name`` a made checkpoint keeps of how it was made (None when absent or unreadable)."""
    path = Path(directory) / name
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def initialised_checkpoint(trained: str | os.PathLike, destination: str | os.PathLike, *,
                           seed: int = NULL_MODEL_SEED, config_values: dict | None = None) -> dict:
    """``destination``: ``trained``'s architecture with HF's initialisation under ``seed`` (module docstring).
    ``config_values`` replace config entries the trained checkpoint does not carry faithfully (a GGUF file has
    no ``initializer_range``: the registry gives the published one). Made once: a destination made from the
    same config, values and seed is left as it is."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .directories import locked, replacing

    trained, destination = Path(trained), Path(destination)
    config_values = dict(config_values or {})
    wanted = {"seed": seed, "config_of": str(trained), "config_json": json.loads((trained / "config.json").read_text()),
              "config_values": config_values}
    with locked(destination):
        existing = read_null_model_record(destination)
        if existing is not None and all(existing.get(key) == wanted[key] for key in ("seed", "config_json", "config_values")):
            return existing
        started = time.perf_counter()
        with replacing(destination) as staging:
            config = AutoConfig.from_pretrained(trained)
            for key, value in config_values.items():
                setattr(config, key, value)
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            model.save_pretrained(staging)
            del model
            for name in TOKENIZER_FILES:
                if (trained / name).is_file():
                    shutil.copyfile(trained / name, staging / name)
            record = {**wanted, "initialization": "transformers from_config: _init_weights, normal(0, "
                      f"initializer_range={getattr(config, 'initializer_range', None)}) for linear and embedding "
                      "weights, norms at identity", "torch_version": torch.__version__,
                      "seconds": round(time.perf_counter() - started, 2)}
            (staging / NULL_MODEL_RECORD).write_text(json.dumps(record, indent=2))
        return record
