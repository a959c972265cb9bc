"""Reading a matrix table row group by row group with Arrow's column threads on and off, side by side.

    python benchmarks/matrix_read_threads.py [--width 2048] [--matrices 6] [--repeats 5]

The warehouse decodes row groups on the reading thread (``Warehouse.row_groups``: with column threads the
read peak reached 2.5 matrices now and then on a loaded machine). A matrix row group is one large column and a
few small ones, so the threads had little to parallelise; this measures what turning them off costs.

Writes benchmarks/results/matrix_read_threads.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "matrix_read_threads.json"


def _write(path: Path, width: int, matrices: int) -> None:
    rng = np.random.default_rng(0)
    schema = pa.schema([("layer", pa.int32()), ("sublayer", pa.string()), ("row", pa.int32()),
                        ("values", pa.list_(pa.float64(), width))])
    with pq.ParquetWriter(path, schema) as writer:
        for index in range(matrices):
            matrix = rng.normal(size=(width, width))
            writer.write_table(pa.table({
                "layer": pa.array(np.full(width, index), pa.int32()), "sublayer": ["attn"] * width,
                "row": pa.array(np.arange(width), pa.int32()),
                "values": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), width)}, schema=schema))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--matrices", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    seconds: dict[str, list[float]] = {"threads": [], "one_thread": []}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "jacobians.parquet"
        _write(path, arguments.width, arguments.matrices)
        for _ in range(arguments.repeats):  # alternating, so that the machine's load falls on both alike
            for label, threads in (("threads", True), ("one_thread", False)):
                parquet = pq.ParquetFile(path)
                started = time.perf_counter()
                for index in range(parquet.num_row_groups):
                    parquet.read_row_group(index, columns=["layer", "sublayer", "row", "values"], use_threads=threads)
                seconds[label].append(round(time.perf_counter() - started, 4))
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    result = {"width": arguments.width, "matrices": arguments.matrices, "seconds": seconds,
              "median_seconds": medians, "ratio_one_thread_over_threads": round(medians["one_thread"] /
                                                                                medians["threads"], 3)}
    print(json.dumps(result, indent=1))
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
