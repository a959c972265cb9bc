import json

import numpy as np
import pytest
import torch

from resdyn.corpus import load_training_text
from resdyn.models.loading import load_model
from resdyn.models.tiny import TrainingSettings, train_tiny_model


def test_tiny_training_lowers_loss_and_saves_loadable_checkpoints(tmp_path):
    text = load_training_text(use_hub=False).text
    settings = TrainingSettings(steps=40, batch_size=8, sequence_length=64, seed=3, hidden_size=32, n_layers=2)
    record = train_tiny_model("llama", text, tmp_path, save_steps=[0, 40], settings=settings)
    losses = np.array(record["losses"])
    assert losses.shape == (40,)
    assert losses[-5:].mean() < 0.75 * losses[:5].mean()  # ln(257) = 5.55 at init
    assert json.loads((tmp_path / "training.json").read_text())["checkpoints"] == ["step-000000", "step-000040"]
    loaded = load_model(str(tmp_path / "step-000040"), dtype="float32")
    batch = torch.tensor([list(text[:65].encode("utf-8"))[:65]])
    with torch.no_grad():
        loss = loaded.model(input_ids=batch, labels=batch).loss
    assert float(loss) < losses[0]
    again = train_tiny_model("llama", text, tmp_path / "again", save_steps=[40], settings=settings)
    assert again["losses"] == record["losses"]  # seeded: reproducible


def test_resumed_training_equals_one_straight_run(tmp_path):
    text = load_training_text(use_hub=False).text[:200_000]
    settings = TrainingSettings(steps=12, batch_size=4, sequence_length=32, seed=5, hidden_size=32, n_layers=2)
    straight = train_tiny_model("olmo3", text, tmp_path / "straight", save_steps=[0, 6, 12], settings=settings)
    train_tiny_model("olmo3", text, tmp_path / "pieces", save_steps=[0, 6, 12], settings=settings, stop_at=6)
    resumed = train_tiny_model("olmo3", text, tmp_path / "pieces", save_steps=[0, 6, 12], settings=settings)
    # resuming reloads float32 weights into fresh tensors, so matmuls may round a last bit differently
    assert resumed["losses"] == pytest.approx(straight["losses"], rel=1e-5)
    a = load_model(str(tmp_path / "straight" / "step-000012"), dtype="float32").model.state_dict()
    b = load_model(str(tmp_path / "pieces" / "step-000012"), dtype="float32").model.state_dict()
    assert all(torch.allclose(a[name], b[name], rtol=1e-5, atol=1e-6) for name in a)
