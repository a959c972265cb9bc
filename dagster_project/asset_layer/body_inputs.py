"""What an asset body is handed about its partition's model and text, resolved from the warehouse by the layer.

A body asks for ``checkpoint`` (:class:`PartitionCheckpoint`: the registry entry and where the weights are to be
loaded from) and ``corpus`` (:class:`Corpora`: the analysis and training texts) by parameter name; it never
resolves a registry file, a models directory or a corpus directory itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from resdyn.corpus import Corpus, load_training_text, load_wikitext
from resdyn.dagster_project.store.artefacts import StudyArtefacts, kept_location
from resdyn.models.registry import MADE_REVISIONS, SIMEX_BASELINE, ModelSpec


@dataclass(frozen=True)
class PartitionCheckpoint:
    """One partition's model: its registry entry (``spec``, ``revision``), the model step's ways of making it in
    the model store (:meth:`train_tiny`, :meth:`import_gguf`) and, once made, the weights to load
    (:meth:`weights`): where the model store is stays here."""

    model: str
    checkpoint: str
    spec: ModelSpec
    revision: str
    _models_directory: Path

    def weights(self) -> tuple[str, str | None]:
        """(path or hub id, revision) of the partition's weights; tiny-suite and GGUF checkpoints are local
        directories the model step wrote (an error naming that step when it has not run)."""
        spec = self.spec
        if spec.is_tiny:
            return str(self._models_directory / self.model / self.checkpoint), None
        if spec.is_gguf:  # imported (or initialised) by model_checkpoints
            from resdyn.models.sources import gguf_checkpoint_label, store_directory

            # the SIMEX baseline is the imported file itself, not a copy
            made = self.revision in MADE_REVISIONS and self.revision != SIMEX_BASELINE
            label = self.checkpoint if made else gguf_checkpoint_label(spec)
            directory = store_directory(self._models_directory, spec, label)
            if not (directory / "config.json").is_file():
                raise FileNotFoundError(f"{self.model}@{self.checkpoint} has not been imported into {directory} yet: "
                                        "materialize its model_checkpoints asset first (resdyn run does)")
            return str(directory), None
        if Path(spec.source).expanduser().is_dir():
            return spec.source, None
        return spec.source, self.revision

    def train_tiny(self, text_loader, progress) -> dict:
        """Train (or find trained) this tiny-suite member up to its checkpoint, in the model store; its training
        record (``losses`` per step over the whole run, ``corpus``). ``text_loader``: () -> (text, label);
        ``progress(step, loss)``."""
        import json

        from resdyn.models.tiny import ensure_tiny_checkpoint

        directory = ensure_tiny_checkpoint(self.spec.family, self._models_directory / self.model, self.checkpoint,
                                           save_checkpoints=list(self.spec.checkpoints), text_loader=text_loader,
                                           progress=progress)
        return json.loads((directory.parent / "training.json").read_text())

    def import_gguf(self, progress) -> dict:
        """Import this GGUF checkpoint (or draw its null model, or add its rounding noise) into the model store,
        once per file; where its weights came from (``source_file``, ``source_sha256``, ...)."""
        from resdyn.models.sources import ensure_local_checkpoint

        _, made = ensure_local_checkpoint(self.spec, self.checkpoint, self._models_directory, progress=progress)
        return made.as_dict()


@dataclass(frozen=True)
class Corpora:
    """The texts of the study, from the configured directories (StudyConfig: flag > variable > default)."""

    wikitext_directory: str | None
    wikitext_tokenized_directory: str | None

    def analysis_text(self) -> Corpus:
        """The WikiText-2 test split the samples are drawn from."""
        return load_wikitext("test", directory=self.wikitext_directory)

    def training_text(self) -> tuple[str, str]:
        """(text, label) the tiny suite trains on."""
        corpus = load_training_text(directory=self.wikitext_tokenized_directory,
                                    raw_directory=self.wikitext_directory)
        return corpus.text, corpus.label


def partition_checkpoint(warehouse, model: str, checkpoint: str) -> PartitionCheckpoint:
    """The :class:`PartitionCheckpoint` of ``model@checkpoint`` (``warehouse``: the WarehouseResource)."""
    store = warehouse.open()
    spec, revision = warehouse.registry().resolve(f"{model}@{checkpoint}")
    return PartitionCheckpoint(model, checkpoint, spec, revision, store.models_directory)


def corpora(warehouse) -> Corpora:
    return Corpora(warehouse.wikitext_directory or None, warehouse.wikitext_tokenized_directory or None)


@dataclass(frozen=True)
class PublishedStudy:
    """Every complete partition, read-only, for the study-level assets (the checkpoint comparisons, the report):
    what they draw and build, and the metadata the UI shows of it. They draw where ``_artefacts`` says (the
    warehouse folder, or a local folder an object-store warehouse uploads once the asset's body is done)."""

    _store: object  # the Warehouse
    _artefacts: StudyArtefacts

    def comparison_figures(self) -> dict[str, dict[str, Path]]:
        """Per comparison, per model, its figure (dagster_project/study/report.py ``checkpoint_comparisons``)."""
        from resdyn.dagster_project.study.report import checkpoint_comparisons

        return checkpoint_comparisons(self._store, self._artefacts.figures)

    def report(self) -> tuple[dict, dict]:
        """(section name -> (table, figure), metadata of report.html: where it is kept and its size)."""
        import dagster as dg

        from resdyn.dagster_project.study.report import build_report

        output, results = build_report(self._store, self._artefacts.report, self._artefacts.figures)
        return results, {"path": dg.MetadataValue.path(kept_location(output)),
                         "bytes": output.stat().st_size}
