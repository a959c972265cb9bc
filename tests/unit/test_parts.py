"""A GGUF file that ships in parts (resdyn.models.parts): concatenated once, checked, reused."""

import hashlib
import os
from pathlib import Path

import pytest

from resdyn.models import parts as parts_module
from resdyn.models.parts import AssembledFileError, assembled_gguf, check_gguf_source
from resdyn.models.registry import MissingPackageError, ModelRegistry, ModelSpec


def _spec(tmp_path, *, sha256=None, size=None, names=("a.part00", "a.part01", "a.part02")) -> ModelSpec:
    contents = [bytes([n]) * (1000 + 7 * n) for n in range(len(names))]
    for name, content in zip(names, contents):
        (tmp_path / name).write_bytes(content)
    whole = b"".join(contents)
    return ModelSpec("fake", "llama", "fake.gguf", {"trained": "gguf"},
                     sha256=sha256 or hashlib.sha256(whole).hexdigest(), size=len(whole) if size is None else size,
                     parts=[str(tmp_path / name) for name in names])


def test_the_parts_are_concatenated_once_and_checked(tmp_path):
    spec = _spec(tmp_path)
    target = assembled_gguf(spec, tmp_path / "cache")
    assert target == tmp_path / "cache" / "fake.gguf"
    assert target.read_bytes() == b"".join((tmp_path / f"a.part0{n}").read_bytes() for n in range(3))
    assert hashlib.sha256(target.read_bytes()).hexdigest() == spec.sha256
    assert not list((tmp_path / "cache").glob("*.inprogress"))


def test_a_valid_cache_file_is_reused_without_reading_the_parts(tmp_path, monkeypatch):
    spec = _spec(tmp_path)
    target = assembled_gguf(spec, tmp_path / "cache")
    mtime = target.stat().st_mtime_ns
    for part in spec.parts:  # the parts are gone (the wheels uninstalled): the verified cache still serves
        Path(part).unlink()

    def no_hashing(*arguments):
        raise AssertionError("the parts were read again")

    monkeypatch.setattr(parts_module, "locate_parts", no_hashing)
    monkeypatch.setattr(parts_module.hashlib, "sha256", no_hashing)
    assert assembled_gguf(spec, tmp_path / "cache") == target and target.stat().st_mtime_ns == mtime


def test_a_changed_cache_file_is_made_again(tmp_path):
    spec = _spec(tmp_path)
    target = assembled_gguf(spec, tmp_path / "cache")
    good = target.read_bytes()
    target.write_bytes(b"x" * len(good))  # same size, other bytes: its stamp no longer matches (mtime)
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    assert assembled_gguf(spec, tmp_path / "cache").read_bytes() == good


def test_a_wrong_sha256_is_refused_and_leaves_no_file(tmp_path):
    spec = _spec(tmp_path, sha256="0" * 64)
    with pytest.raises(AssembledFileError, match="make install") as error:
        assembled_gguf(spec, tmp_path / "cache")
    assert "0000000000000000" in str(error.value) and "\n" not in str(error.value)
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]


def test_a_wrong_size_is_refused_before_anything_is_read(tmp_path):
    spec = _spec(tmp_path, size=12)
    with pytest.raises(AssembledFileError, match="not the registered 12"):
        assembled_gguf(spec, tmp_path / "cache")


def test_a_missing_part_names_make_install(tmp_path):
    spec = _spec(tmp_path)
    (tmp_path / "a.part01").unlink()
    with pytest.raises(MissingPackageError, match="part 2/3 .*`make install`"):
        assembled_gguf(spec, tmp_path / "cache")
    with pytest.raises(MissingPackageError, match="make install"):
        check_gguf_source(spec)  # what `resdyn run` checks before it starts
    uninstalled = ModelSpec("fake", "llama", "fake.gguf", sha256="0" * 64,
                            parts=["package:resdyn-no-such-distribution/data/fake.gguf.part00"])
    with pytest.raises(MissingPackageError, match="resdyn-no-such-distribution.*`make install`"):
        check_gguf_source(uninstalled)


def test_the_registered_gemma3_entry_lists_its_four_parts():
    spec = ModelRegistry().get("gemma3-270m")
    assert spec.is_gguf and spec.family == "gemma3" and len(spec.parts) == 4 and spec.size == 253_113_024
    assert spec.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert {entry.split("@")[0] for entry in ModelRegistry().suite("study")} == {"smollm2-135m", "gemma3-270m"}


def test_a_suite_names_whole_models_or_single_checkpoints():
    """The study runs two checkpoints of both models (null model and trained; not the quantized null model, which
    informs no claim), the SIMEX suite each model's SIMEX set (which a run of the whole model leaves out: it runs at
    its own settings); the demo names SmolLM2's two checkpoints and leaves the rest to the study."""
    from resdyn.models.registration import Request, partitions_of
    from resdyn.models.registry import SIMEX_REVISIONS

    registry = ModelRegistry()
    study = partitions_of(Request(suite="study"), registry)
    assert study == [f"{model}@{c}" for model in ("smollm2-135m", "gemma3-270m") for c in ("init", "trained")]
    assert partitions_of(Request(suite="simex"), registry) == [f"{model}@{c}" for model in ("smollm2-135m", "gemma3-270m")
                                                               for c in SIMEX_REVISIONS]
    assert len(SIMEX_REVISIONS) == 16 and not set(SIMEX_REVISIONS) & {
        key.split("@")[1] for key in partitions_of(Request(models=("gemma3-270m",)), registry)}
    assert partitions_of(Request(suite="smollm2"), registry) == [
        f"smollm2-135m@{c}" for c in ("init", "init-quantized", "trained")]
    default = partitions_of(Request(suite="default"), registry)
    assert [k for k in default if k.startswith("smollm2")] == ["smollm2-135m@init", "smollm2-135m@trained"]
    assert len(default) == 11


@pytest.mark.parametrize(("given", "label", "run"), [
    ((), "local", ["local", "init", "init-quantized"]),
    (("local",), "local", ["local"]),
    (("local", "init"), "local", ["local", "init"]),
    (("init", "simex-x0", "simex-x3-5"), "local", ["init", "simex-x0", "simex-x3-5"]),
    (("mine", "init"), "mine", ["mine", "init"]),
])
def test_checkpoint_selects_among_a_gguf_files_null_model_checkpoints(tmp_path, given, label, run):
    """--null-model registers the file's null model, its quantized control and its SIMEX set; --checkpoint then
    names which of them run (and, once, the file's own label; without it, all but the SIMEX set, which --simex
    runs): the trained file and its null model without the quantized control is one command."""
    import random

    from resdyn.models.registration import Request, partitions_of
    from resdyn.models.registry import SIMEX_REVISIONS

    from ..gguf_files import random_model, write_gguf

    path = write_gguf(random_model("llama", random.randrange(1000), hidden_size=32), tmp_path / "tg.gguf")
    registry = ModelRegistry(tmp_path / "registry.json")
    said = []
    keys = partitions_of(Request(models=(str(path),), checkpoints=given, null_model=True), registry, say=said.append)
    assert keys == [f"tg@{c}" for c in run]
    assert set(registry.get("tg").checkpoints) == {label, "init", "init-quantized", *SIMEX_REVISIONS}
    assert "the SIMEX set (16 checkpoints simex-x0 ... simex-x3-5: run it with `resdyn run --model tg --simex`)" \
        in said[0]
    with pytest.raises(ValueError, match="at most one --checkpoint label.*may also select"):
        partitions_of(Request(models=(str(path),), checkpoints=("a", "b"), null_model=True), registry)
