"""Cost of the transient-dynamics assets per sublayer, against the rest of the spectral work on the same
matrix, side by side in one run (a benchmark, not a test).

    python benchmarks/transient.py [--widths 256 1024 4096]

For each width d: a stand-in mean Jacobian J = I + 0.5 G / sqrt(d) (G Ginibre: non-normal like the
measured ones), timed through ``resdyn.spectra.analyse_sublayer`` (what ``spectral_analysis`` does per
sublayer) and ``resdyn.transient.analyse_transient`` (numerical abscissa and radius, rho_eps for the
three eps, Kreiss bound), and one window of 8 maps of ``transient_growth``. Target: transient <= spectral.
Writes benchmarks/results/transient.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resdyn import spectra, transient  # noqa: E402


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 1024])
    arguments = parser.parse_args()
    rows = []
    for d in arguments.widths:
        rng = np.random.default_rng(d)
        matrix = np.eye(d) + 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
        _, spectral_seconds = timed(spectra.analyse_sublayer, matrix)
        result, transient_seconds = timed(transient.analyse_transient, matrix)
        chain = [np.eye(d) + 0.5 * rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(8)]
        _, growth_seconds = timed(lambda chain=chain: list(transient.transient_growth(chain, [1.0] * 8, windows=(8,),
                                                                                       full_depth=False)))
        row = {"d": d, "spectral_seconds": round(spectral_seconds, 2), "transient_seconds": round(transient_seconds, 2),
               "transient_vs_spectral": round(transient_seconds / spectral_seconds, 3),
               "growth_window_8_seconds": round(growth_seconds, 2),
               "numerical_radius_gap": result.numerical_radius_upper / result.numerical_radius - 1,
               "pseudospectral_radii": result.pseudospectral_radii, "cores": os.cpu_count()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    output = Path(__file__).resolve().parent / "results" / "transient.json"
    output.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
