"""Cray MPICH's Slingshot network/CXI counter summary at MPI_Finalize.

Fixture provenance (see also hpcvar/parsers/cxi_summary.py):

* The marker ``MPICH Slingshot CXI Counter Summary:`` and the header line
  ``Counter                                Samples          Min         (/s)         Mean         (/s)          Max         (/s)``
  are verbatim as quoted by the Perlmutter variability study's parser, which also gives the
  column order (name, samples, min, min/s, mean, mean/s, max, max/s):
  https://github.com/hpcgroup/perf-variability-ipdps26/blob/d02504627d087e56acd2b19cace50100eac94447/extract_data_perlmutter/extract_ml.py
* Counter names are from that study's published data
  (plot/perlmutter/counter_corr/MILC_mean.csv in the same repository).
* ``MPICH Slingshot Network Summary: 0 network timeouts`` as printed by Cray MPICH and quoted in
  job scripts and HPE's dgnettest output.

The numbers in the rows are made up (the column widths of the rows are not documented; the
reader splits on whitespace).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from hpcvar.parsers import cxi_summary, detect
from hpcvar.parsers.errors import ParseError

HEADER = ("Counter                                Samples          Min         (/s)         Mean         (/s)"
          "          Max         (/s)")
ROWS = [  # name, samples, min, min/s, mean, mean/s, max, max/s
    ("atu_cache_evictions", 64, 512, 0.4, 4110, 3.6, 61240, 53.3),
    ("lpe_net_match_priority_0", 64, 904695, 786.7, 1960940, 1705.2, 2979960, 2591.3),
    ("hni_rx_paused_0", 64, 371553, 323.1, 1960270, 1704.6, 5466732, 4753.7),
    ("hni_tx_paused_1", 64, 4267, 3.7, 93516, 81.3, 682011, 593.1),
    ("parbs_tarb_pi_posted_blocked_cnt", 64, 10, 0.0, 2048.5, 1.8, 9000, 7.8),
    ("rh:nacks", 64, 5, 0.0, 25, 0.0, 85, 0.1),
]


def report_lines(rows=ROWS, timeouts=0) -> list[str]:
    lines = [f"MPICH Slingshot Network Summary: {timeouts} network timeouts", "",
             "MPICH Slingshot CXI Counter Summary:", HEADER]
    lines += [f"{r[0]:<38}{r[1]:>9}{r[2]:>13}{r[3]:>13}{r[4]:>13}{r[5]:>13}{r[6]:>13}{r[7]:>13}" for r in rows]
    return lines


def stamped(lines: list[str], t0: float = 1_740_000_000.0) -> str:
    return "".join(f"{t0 + 0.25 * i:.6f} {line}\n" for i, line in enumerate(lines))


def test_summary_inside_timestamped_app_output(tmp_path):
    app = ["+ export MPICH_OFI_CXI_COUNTER_REPORT=2", "MIMD version 7.8.1", "RUNNING COMPLETED",
           "Time = 1.563461e+02 seconds", "exit: Wed Jan  8 10:00:00 2025", ""]
    path = tmp_path / "stdout.txt"
    path.write_text(stamped(app + report_lines() + ["", "run finished"]))
    frame = cxi_summary.read(path)
    assert frame["counter"].tolist() == [r[0] for r in ROWS]
    row = frame.set_index("counter").loc["hni_rx_paused_0"]
    assert (row["samples"], row["min"], row["min_per_s"], row["mean"], row["mean_per_s"], row["max"],
            row["max_per_s"]) == (64, 371553, 323.1, 1960270, 1704.6, 5466732, 4753.7)
    assert frame.set_index("counter").loc["parbs_tarb_pi_posted_blocked_cnt", "mean"] == 2048.5
    assert frame["line"].tolist() == list(range(11, 11 + len(ROWS)))
    (rep,) = frame.attrs["reports"]
    assert rep["network_timeouts"] == 0 and rep["report_level"] == ">=2" and rep["line"] == 7
    assert rep["ts"] == 1_740_000_000.0 + 0.25 * 6
    assert frame.attrs["report_level_set"] == 2 and frame.attrs["timestamped"]

    info = cxi_summary.describe(path)
    assert info["kind"] == "cxi_counter_summary" and info["records"] == len(ROWS)
    assert info["figures"]["network_timeouts"] == 0 and info["figures"]["max hni_rx_paused_0"] == 5466732
    assert info["time_span"] == ["2025-02-19T21:20:01.500000+00:00"] * 2


def test_plain_output_srun_labels_and_several_reports(tmp_path):
    first = report_lines(ROWS[:2], timeouts=3)
    second = [f"0: {line}" for line in report_lines(ROWS[2:], timeouts=0)]
    level1 = ["MPICH Slingshot Network Summary: 1 network timeouts"]
    path = tmp_path / "job.out"
    path.write_text("\n".join(["hello from rank 0", *first, "", "Computed Ratios   Min  Mean  Max",
                               "some ratio   0.4  0.7  1.3", *second, "app done", *level1]) + "\n")
    frame = cxi_summary.read(path)
    reports = frame.attrs["reports"]
    assert [r["network_timeouts"] for r in reports] == [3, 0, 1]
    assert [r["report_level"] for r in reports] == [">=2", ">=2", "1"]
    assert [r["counters"] for r in reports] == [2, 4, 0]
    assert frame.groupby("report")["counter"].apply(list).to_dict() == {
        1: [r[0] for r in ROWS[:2]], 2: [r[0] for r in ROWS[2:]]}
    assert math.isnan(reports[0]["ts"]) and frame.attrs["report_level_set"] is None
    assert cxi_summary.describe(path)["figures"]["network_timeouts"] == 4


def test_level_1_only_and_registration(tmp_path):
    path = tmp_path / "short.out"
    path.write_text("MPICH Slingshot Network Summary: 0 network timeouts\n")
    assert detect(path) is cxi_summary
    info = cxi_summary.describe(path)
    assert info["records"] == 1 and info["figures"]["report_level"] == "1" and info["figures"]["counters"] == 0
    out = subprocess.run([sys.executable, "-m", "hpcvar", "inspect", str(path)], capture_output=True, text=True)
    assert out.returncode == 0 and "cxi_counter_summary" in out.stdout and "network_timeouts: 0" in out.stdout


def test_bad_input_names_the_line(tmp_path):
    broken = tmp_path / "broken.out"
    broken.write_text("x\nMPICH Slingshot CXI Counter Summary:\nCounter Min Max\n")
    with pytest.raises(ParseError, match="expected the header") as err:
        cxi_summary.read(broken)
    assert err.value.line == 3
    none = tmp_path / "none.out"
    none.write_text("nothing to see\n")
    with pytest.raises(ParseError, match="no Cray MPICH report"):
        cxi_summary.read(none)
    garbled = tmp_path / "garbled.out"
    garbled.write_text("MPICH Slingshot Network Summary: many network timeouts\n")
    with pytest.raises(ParseError, match="network timeouts") as err:
        cxi_summary.read(garbled)
    assert err.value.line == 1
