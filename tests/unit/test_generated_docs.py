"""docs/performance.md says what benchmarks/results/*.json say (it is generated, never typed)."""

import importlib.util
import json
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("performance_tables",
                                                  REPOSITORY / "docs" / "tools" / "performance_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_performance_doc_is_what_the_results_say():
    tool = _tool()
    assert tool.main(["--check"]) == 0, "run python docs/tools/performance_tables.py"


def test_every_result_file_has_a_section_and_its_numbers(tmp_path, monkeypatch):
    tool = _tool()
    (tmp_path / "one.json").write_text(json.dumps({"seconds": 12.5, "label": "x"}))
    (tmp_path / "two.json").write_text(json.dumps([{"d": 256, "seconds": 0.125}, {"d": 512, "seconds": 1.5}]))
    monkeypatch.setattr(tool, "RESULTS", tmp_path)
    text = tool.render()
    assert "## one" in text and "| seconds | 12.5 |" in text and "| label | x |" in text
    assert "| d | seconds |" in text and "| 256 | 0.125 |" in text and "| 512 | 1.5 |" in text
