"""The tiny model suite: small real-family models trained on CPU, saved as HF checkpoints.

Each run starts from a seeded random init (checkpoint ``step-000000``: the null model, same
architecture, nothing learned) and trains with AdamW (linear warm-up, cosine decay) on windows of
byte tokens drawn from the training text, saving ``save_pretrained`` directories at the requested
steps plus ``training.json`` with the loss curve. Same seed, same text -> same checkpoints.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from .byte_tokenizer import build_byte_tokenizer
from .tiny_configs import tiny_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingSettings:
    steps: int = 400
    batch_size: int = 32
    sequence_length: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    seed: int = 0
    hidden_size: int = 64
    n_layers: int = 4


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


def checkpoint_step(name: str) -> int:
    if not name.startswith("step-") or not name[5:].isdigit():
        raise ValueError(f"tiny-suite checkpoints are named step-NNNNNN, not {name!r}")
    return int(name[5:])


def _learning_rate(step: int, settings: TrainingSettings) -> float:
    if step < settings.warmup_steps:
        return settings.learning_rate * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
    return settings.learning_rate * 0.5 * (1 + math.cos(math.pi * progress))


def _save(model, tokenizer, directory: Path) -> None:
    """save_pretrained into a temp directory, then rename: a checkpoint is whole or absent."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.inprogress-"))
    model.save_pretrained(temporary)
    tokenizer.save_pretrained(temporary)
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)


def _state_path(output_directory: Path, step: int) -> Path:
    return output_directory / ".training_state" / f"{checkpoint_name(step)}.pt"


def _latest_resumable(output_directory: Path, save_steps: list[int], stop_at: int) -> int | None:
    candidates = [step for step in save_steps if step <= stop_at and _state_path(output_directory, step).is_file()
                  and (output_directory / checkpoint_name(step) / "config.json").is_file()]
    return max(candidates) if candidates else None


def train_tiny_model(
    family: str,
    text: str,
    output_directory: Path,
    *,
    save_steps: list[int],
    settings: TrainingSettings = TrainingSettings(),
    stop_at: int | None = None,
    corpus_label: str = "",
    progress: Callable[[int, float], None] | None = None,
) -> dict:
    """Train one tiny ``family`` model; returns the record written to ``training.json``.

    The schedule always spans ``settings.steps``; ``stop_at`` ends the run early. Each saved
    checkpoint also stores the optimizer and data-order state, so a later call resumes from the
    latest checkpoint bit-for-bit instead of starting over.
    """
    save_steps = sorted(set(save_steps))
    stop_at = settings.steps if stop_at is None else stop_at
    if save_steps and save_steps[-1] > settings.steps or stop_at > settings.steps:
        raise ValueError(f"save/stop step past the {settings.steps} training steps")
    output_directory = Path(output_directory)
    tokenizer = build_byte_tokenizer()
    tokens = torch.tensor(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64))
    if len(tokens) <= settings.sequence_length + 1:
        raise ValueError("the training text is shorter than one training window")
    torch.manual_seed(settings.seed)
    config = tiny_config(family, hidden_size=settings.hidden_size, n_layers=settings.n_layers)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    first_step = 0
    resume = _latest_resumable(output_directory, save_steps, stop_at)
    if resume is not None:
        model = AutoModelForCausalLM.from_pretrained(output_directory / checkpoint_name(resume), dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate,
                                      weight_decay=settings.weight_decay)
        state = torch.load(_state_path(output_directory, resume), weights_only=False)
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        losses, first_step = list(state["losses"]), resume
        log.info("resuming tiny %s from %s", family, checkpoint_name(resume))
    model.train()
    offsets = torch.arange(settings.sequence_length)
    started = time.perf_counter()
    for step in range(first_step, stop_at + 1):
        if step in save_steps and step != resume:
            _save(model, tokenizer, output_directory / checkpoint_name(step))
            _state_path(output_directory, step).parent.mkdir(exist_ok=True)
            torch.save({"optimizer": optimizer.state_dict(), "generator": generator.get_state(), "losses": losses},
                       _state_path(output_directory, step))
        if step == stop_at:
            break
        starts = torch.randint(0, len(tokens) - settings.sequence_length, (settings.batch_size,), generator=generator)
        batch = tokens[starts[:, None] + offsets]
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, settings)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None and (step % 50 == 0 or step == stop_at - 1):
            progress(step, losses[-1])
    record = {
        "family": family,
        "settings": asdict(settings),
        "corpus": corpus_label,
        "losses": losses,
        "checkpoints": [checkpoint_name(step) for step in save_steps if step <= stop_at],
        "seconds": time.perf_counter() - started,
    }
    curve = output_directory / "training.json"
    if not curve.is_file() or len(json.loads(curve.read_text())["losses"]) <= len(losses):
        curve.write_text(json.dumps(record))  # keep the longest run's curve
    log.info("trained tiny %s: loss %.3f -> %.3f in %.0f s", family, losses[0] if losses else float("nan"),
             losses[-1] if losses else float("nan"), record["seconds"])
    return record


def ensure_tiny_checkpoint(
    family: str,
    model_directory: Path,
    checkpoint: str,
    *,
    save_checkpoints: list[str],
    text_loader: Callable[[], tuple[str, str]],
    settings: TrainingSettings = TrainingSettings(),
    progress: Callable[[int, float], None] | None = None,
) -> Path:
    """The directory of a tiny-suite checkpoint, training the run first if it is not there yet.

    A file lock makes concurrent requests for checkpoints of one model train it once.
    ``text_loader`` returns ``(text, corpus_label)`` and is called only when training is needed.
    """
    from ..files import file_lock

    model_directory = Path(model_directory)
    target = model_directory / checkpoint
    if (target / "config.json").is_file():
        return target
    model_directory.mkdir(parents=True, exist_ok=True)
    with file_lock(model_directory / ".train.lock"):
        if (target / "config.json").is_file():
            return target
        # the schedule spans the suite's last checkpoint; train only as far as asked, resuming
        # from the latest checkpoint already on disk
        steps = sorted(map(checkpoint_step, set(save_checkpoints) | {checkpoint}))
        text, label = text_loader()
        train_tiny_model(family, text, model_directory, save_steps=steps,
                         settings=TrainingSettings(**{**asdict(settings), "steps": steps[-1]}),
                         stop_at=checkpoint_step(checkpoint), corpus_label=label, progress=progress)
    return target
