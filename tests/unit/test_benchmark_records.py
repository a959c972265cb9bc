"""benchmarks/run_log.py and benchmarks/study.py read back what time(1) and the CLI wrote, on fresh numbers."""

import random
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "benchmarks"))

import study  # noqa: E402
from run_log import parse_run_log  # noqa: E402


def _log(wall_seconds: float, rss_kb: int, steps: dict, exit_status: int = 0) -> str:
    """A run's output as `/usr/bin/time -v resdyn run` leaves it (the CLI's lines, then time(1)'s report)."""
    hours, rest = divmod(wall_seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    elapsed = f"{int(hours)}:{int(minutes):02d}:{seconds:05.2f}" if hours else f"{int(minutes)}:{seconds:05.2f}"
    return ("[1/1] m@c ok in 12.0 s; checks 6/6 passed\n"
            "    steps: " + ", ".join(f"{name} {value:.1f} s" for name, value in steps.items()) + "\n"
            "\tCommand being timed: \"resdyn run\"\n"
            f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {elapsed}\n"
            f"\tMaximum resident set size (kbytes): {rss_kb}\n"
            f"\tExit status: {exit_status}\n")


def test_a_run_log_gives_back_its_wall_time_memory_and_steps(fresh_seed):
    rng = random.Random(fresh_seed)
    wall, rss = rng.uniform(10, 9000), rng.randrange(10**5, 10**7)
    steps = {"measurements": round(rng.uniform(1, 900), 1), "spectral_analysis": round(rng.uniform(1, 200), 1),
             "tiny_check": 0.3}
    numbers = parse_run_log(_log(wall, rss, steps))
    assert abs(numbers["wall_seconds"] - wall) <= 0.06 and numbers["max_rss_kb"] == rss
    assert numbers["max_rss_gib"] == round(rss / 2**20, 2) and numbers["exit_status"] == 0
    assert numbers["checks_passed"] == "6/6"
    assert numbers["stages"] == {name: value for name, value in steps.items() if value >= 1.0}


def test_the_study_record_sums_each_model_and_the_whole_study(fresh_seed):
    rng = random.Random(fresh_seed)
    walls = {f"{model}@{checkpoint}": rng.uniform(60, 1500) for model in ("a", "b") for checkpoint in ("init", "trained")}
    rss = {key: rng.randrange(10**6, 4 * 10**6) for key in walls}
    results = study.record({key: _log(walls[key], rss[key], {"measurements": 5.0}) for key in walls}, "test")
    by_model = {row["model"]: row for row in results["models"]}
    for model in ("a", "b"):
        keys = [key for key in walls if key.startswith(model + "@")]
        assert abs(by_model[model]["wall_minutes"] - sum(walls[key] for key in keys) / 60) <= 0.15
        assert by_model[model]["max_rss_gib"] == round(max(rss[key] for key in keys) / 2**20, 2)
    assert abs(results["total_wall_minutes"] - sum(walls.values()) / 60) <= 0.25
    assert [row["partition"] for row in results["partitions"]] == list(walls)
    assert all(row["measurements s"] == 5.0 for row in results["partitions"])
