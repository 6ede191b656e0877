"""``hpcvar compare``: verdicts on samples with a planted truth (shift, added mode, wider spread,
no change over many pairs), the command's exit codes and outputs, bad input, date ranges of a
collated dataset, and ReFrame sessions run for real and read back from ReFrame's database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from hpcvar.analyses import compare as cmp
from hpcvar.cli import build_parser, main
from hpcvar.data.dataset import Dataset
from hpcvar.results.compare import CompareResult
from hpcvar.settings import CompareSettings, SettingsError

REPO = Path(__file__).resolve().parents[1]
HPCVAR = str(Path(sys.executable).with_name("hpcvar"))
REFRAME = str(Path(sys.executable).with_name("reframe"))


def samples(test, variable, values, unit="us", **extra) -> pd.DataFrame:
    return pd.DataFrame({"test": test, "variable": variable, "value": np.asarray(values, float), "unit": unit,
                         **extra})


def one(table: pd.DataFrame, test: str, variable: str | None = None) -> dict:
    rows = table[(table["test"] == test) & ((table["variable"] == variable) if variable else True)]
    assert len(rows) == 1, rows
    return rows.iloc[0].to_dict()


def strict_json(path: Path) -> dict:
    def no_constants(name):
        raise AssertionError(f"{path} holds {name}")
    return json.loads(path.read_text(), parse_constant=no_constants)


# --- verdicts on planted truth -------------------------------------------------------------------

def test_planted_shift_is_slower_with_the_shift_inside_the_ci():
    rng = np.random.default_rng(1)
    table = cmp.compare(samples("osu", "latency", rng.normal(100, 4, 300)),
                        samples("osu", "latency", rng.normal(105, 4, 300)))
    r = one(table, "osu")
    assert r["verdict"] == "slower" and r["better"] == "lower"
    assert r["shift_ci_low"] < 5.0 < r["shift_ci_high"] and r["shift_ci_low"] > 2.0
    assert r["n_before"] == r["n_after"] == 300 and r["cliffs_delta"] > 0.5 and r["p_holm"] < 1e-10
    assert r["reason"].startswith("median +") and "lower is better" in r["reason"]


def test_shift_ci_covers_the_planted_shift_at_its_level():
    """100 replicate pairs with a planted +6% shift in one comparison: the 95% bootstrap interval
    holds the truth about 95% of the time (measured 95-97% over 400 replications)."""
    rng = np.random.default_rng(8)
    before = pd.concat([samples(f"r{i:03d}", "t", rng.lognormal(0, 0.3, 60)) for i in range(100)])
    after = pd.concat([samples(f"r{i:03d}", "t", 1.06 * rng.lognormal(0, 0.3, 60)) for i in range(100)])
    t = cmp.compare(before, after, n_boot=500)
    coverage = ((t["shift_ci_low"] <= 6) & (6 <= t["shift_ci_high"])).mean()
    assert 0.88 <= coverage <= 1.0 and (t["ci_level"] == 0.95).all()


def test_planted_speed_up_is_faster_and_direction_follows_better():
    rng = np.random.default_rng(2)
    b, a = rng.normal(100, 4, 300), rng.normal(94, 4, 300)
    assert one(cmp.compare(samples("t", "time", b), samples("t", "time", a)), "t")["verdict"] == "faster"
    # The same numbers as a bandwidth: a rate unit is higher-is-better, so lower values are slower.
    r = one(cmp.compare(samples("t", "bw", b, unit="GB/s"), samples("t", "bw", a, unit="GB/s")), "t")
    assert r["better"] == "higher" and r["verdict"] == "slower"
    assert r["shift_ci_low"] < -6.0 < r["shift_ci_high"]
    # ... and an explicit pattern overrides the unit.
    r = one(cmp.compare(samples("t", "bw", b, unit="GB/s"), samples("t", "bw", a, unit="GB/s"),
                        lower_is_better=["b*"]), "t")
    assert r["better"] == "lower" and r["verdict"] == "faster"


def test_added_mode_with_the_same_mean_is_changed_shape_with_the_modes_reported():
    rng = np.random.default_rng(3)
    before = rng.normal(100, 2.5, 400)
    after = np.concatenate([rng.normal(95, 1.5, 200), rng.normal(105, 1.5, 200)])  # mean 100, two modes
    r = one(cmp.compare(samples("seastar", "latency", before), samples("seastar", "latency", after)), "seastar")
    assert r["verdict"] == "changed shape" and r["modes_changed"]
    assert abs(r["shift_pct"]) < 2.0
    assert len(r["modes_before"]) == 1 and abs(r["modes_before"][0]["location"] - 100) < 1.5
    locations = sorted(m["location"] for m in r["modes_after"])
    assert len(locations) == 2 and abs(locations[0] - 95) < 1.0 and abs(locations[1] - 105) < 1.0
    assert all(abs(m["weight"] - 0.5) < 0.1 for m in r["modes_after"])
    assert "modes 1 -> 2" in r["reason"]


def test_wider_spread_with_the_same_median_is_changed_shape():
    # The SeaStar upgrade at 12 processes per node: same median latency, much wider distribution.
    rng = np.random.default_rng(4)
    r = one(cmp.compare(samples("jaguar", "latency", rng.normal(38, 1, 500)),
                        samples("jaguar", "latency", rng.normal(38, 3, 500))), "jaguar")
    assert r["verdict"] == "changed shape" and r["spread_changed"]
    assert 2.5 < r["iqr_ratio"] < 3.6 and r["shift_ci_low"] < 0 < r["shift_ci_high"]
    assert "spread x" in r["reason"] and "wider" in r["reason"]


def _null_pairs(seed: int, pairs: int = 40):
    """Independent draws from the same distribution for every pair, of several shapes and sizes."""
    rng = np.random.default_rng(seed)
    draws = [lambda n: rng.normal(50, 3, n), lambda n: rng.lognormal(3, 0.3, n),
             lambda n: np.concatenate([rng.normal(10, 0.5, n // 2), rng.normal(14, 0.5, n - n // 2)]),
             lambda n: 5 + rng.exponential(2, n)]
    before, after = [], []
    for i in range(pairs):
        draw, n = draws[i % len(draws)], int(rng.integers(30, 300))
        before.append(samples(f"t{i:02d}", "v", draw(n)))
        after.append(samples(f"t{i:02d}", "v", draw(int(rng.integers(30, 300)))))
    return pd.concat(before), pd.concat(after)


def test_identical_draws_over_many_pairs_raise_no_alarm():
    """Fixed seeds make this deterministic; how often any false alarm happens at all is measured
    by the next test (about 2% of such comparisons, under alpha = 5%)."""
    raw_hits = 0
    for seed in (1, 2, 3):
        table = cmp.compare(*_null_pairs(seed))
        assert len(table) == 40
        assert set(table["verdict"]) == {"unchanged"}, table[table["verdict"] != "unchanged"]
        raw_hits += int((table["ks_p"] < 0.05).sum())
    # Uncorrected, the tests do fire now and then: the Holm correction is what keeps the gate quiet.
    assert raw_hits >= 1


def test_false_alarm_rate_over_many_pairs_is_held_at_alpha():
    """The chance of at least one false alarm among 40 pairs of identical distributions (the
    family-wise error rate that Holm controls) stays under alpha, while each raw test alone fires
    at about alpha per pair."""
    rng = np.random.default_rng(99)
    reps, alarms, raw = 60, 0, []
    for _ in range(reps):
        p = []
        for _ in range(40):
            t = cmp.difference_tests(rng.normal(50, 3, rng.integers(30, 200)), rng.normal(50, 3, rng.integers(30, 200)))
            p.append(t["p_pair"])
            raw.append(t["ks_p"] < 0.05)
        alarms += bool((cmp.holm(p) < 0.05).any())
    assert alarms / reps <= 0.1  # measured: 0.02 (300 replications); the bound leaves room for chance
    assert 0.03 < np.mean(raw) < 0.07


def test_a_tiny_shift_in_huge_samples_is_not_a_regression():
    rng = np.random.default_rng(5)
    r = one(cmp.compare(samples("big", "t", rng.normal(100, 5, 20000)),
                        samples("big", "t", rng.normal(100.5, 5, 20000)), n_boot=200), "big")
    assert r["p_holm"] < 1e-6  # clearly different ...
    assert r["verdict"] == "unchanged" and "below the practical thresholds" in r["reason"]  # ... but 0.5% < 2%
    r = one(cmp.compare(samples("big", "t", rng.normal(100, 5, 20000)),
                        samples("big", "t", rng.normal(100.5, 5, 20000)), n_boot=200, min_effect=0.25), "big")
    assert r["verdict"] == "slower"


def test_pairs_missing_on_one_side_or_too_small_are_not_compared():
    rng = np.random.default_rng(6)
    before = pd.concat([samples("a", "v", rng.normal(1, 0.1, 50)), samples("b", "v", rng.normal(1, 0.1, 3)),
                        samples("c", "v", rng.normal(1, 0.1, 50))])
    after = pd.concat([samples("a", "v", rng.normal(1, 0.1, 50)), samples("b", "v", rng.normal(1, 0.1, 50)),
                       samples("c", "v", rng.normal(1, 0.1, 50), unit="ms"), samples("d", "v", [1.0] * 9)])
    t = cmp.compare(before, after).set_index("test")
    assert t.loc["a", "verdict"] == "unchanged"
    assert t.loc["b", "verdict"] == "not compared" and "3 samples before" in t.loc["b", "reason"]
    assert t.loc["c", "verdict"] == "not compared" and "units differ" in t.loc["c", "reason"]
    assert t.loc["d", "verdict"] == "not compared" and t.loc["d", "reason"] == "only in AFTER"


def test_holm_adjustment():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert cmp.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert cmp.holm([]).size == 0


def test_grouped_samples_widen_the_ci_with_run_to_run_variation():
    """Iterations of a few runs whose medians differ by placement: resampling whole runs gives an
    honest (wider) interval than treating every iteration as independent."""
    rng = np.random.default_rng(7)

    def runs(offsets):
        return pd.concat([samples("coll", "allreduce_8B_us", 20 * (1 + o) + rng.normal(0, 0.3, 300), group=f"r{i}")
                          for i, o in enumerate(offsets)])
    before, after = runs([-0.05, 0.0, 0.05]), runs([-0.03, 0.02, 0.07])
    grouped = one(cmp.compare(before, after), "coll")
    flat = one(cmp.compare(before.drop(columns="group"), after.drop(columns="group")), "coll")
    assert grouped["groups_before"] == 3
    width = lambda r: r["shift_ci_high"] - r["shift_ci_low"]
    assert width(grouped) > 3 * width(flat)


def _runs(rng, n_runs, offsets_sd, shift=0.0, per_run=100, test="milc", variable="step_time_rel"):
    """Steps of ``n_runs`` runs: each run has its own level (placement, neighbours), its steps
    scatter around it."""
    return pd.concat([samples(test, variable, (1 + shift + rng.normal(0, offsets_sd)) * rng.normal(1, 0.01, per_run),
                              unit="ratio", group=f"run{k}") for k in range(n_runs)])


def test_run_to_run_variation_is_not_a_system_change():
    """Same machine, same software: every run lands elsewhere and its steps follow. Pooled as
    independent samples the windows differ 'significantly'; exchanging whole runs, they do not."""
    rng = np.random.default_rng(30)
    before, after = _runs(rng, 8, 0.05), _runs(rng, 8, 0.05)
    runs = one(cmp.compare(before, after), "milc")
    pooled = one(cmp.compare(before, after, independent=True), "milc")
    assert pooled["p_holm"] < 1e-6 and pooled["verdict"] != "unchanged"
    assert runs["inference"] == "groups" and runs["groups_before"] == runs["groups_after"] == 8
    assert runs["p_holm"] > 0.05 and runs["verdict"] == "unchanged"
    assert "exchanging whole runs (8 before, 8 after)" in runs["reason"]


def test_a_shift_of_every_run_is_found_across_runs():
    rng = np.random.default_rng(31)
    r = one(cmp.compare(_runs(rng, 10, 0.02), _runs(rng, 10, 0.02, shift=0.10)), "milc")
    assert r["inference"] == "groups" and r["verdict"] == "slower"
    assert r["shift_ci_low"] < 10 < r["shift_ci_high"] and "run permutation p=" in r["reason"]
    # 20 runs in two sets of 10: 184,756 labellings, so random ones; all of them for 2 + 2 runs.
    assert not r["permutation_exact"] and r["permutations"] == 9999
    few = one(cmp.compare(_runs(rng, 2, 0.02), _runs(rng, 2, 0.02, shift=0.10)), "milc")
    assert few["permutation_exact"] and few["permutations"] == 6 and few["perm_ks_p"] == pytest.approx(2 / 6)
    assert few["verdict"] == "unchanged" and "too few to tell a change from run-to-run variation" in few["reason"]


def test_the_permutation_test_takes_each_runs_values_in_their_own_order_wherever_they_lie():
    """Runs' values interleaved (as steps of overlapping runs arrive) give the same test as the
    same values listed run by run: each run keeps its values in their own order, so thinning a
    run to its share draws the same values from the same seed."""
    rng = np.random.default_rng(33)

    def side(n_runs, shift):
        values = np.concatenate([(1 + shift + rng.normal(0, 0.05)) * rng.normal(1, 0.01, 150) for _ in range(n_runs)])
        return values, np.repeat([f"r{shift}-{k:02d}" for k in range(n_runs)], 150)
    (b, gb), (a, ga) = side(9, 0.0), side(8, 0.1)
    # 17 runs of 150 values: thinned to 117 a run (2,000 in all), drawn at random within each run.
    by_run = cmp.stats.group_permutation_tests(b, a, gb, ga, rng=np.random.default_rng(5), n_perm=999)
    # Interleave the runs as overlapping runs' steps arrive: each value gets a time, increasing
    # within its run, and the values are listed by time.
    order_b, order_a = (np.argsort(np.concatenate([np.sort(rng.random(150)) for _ in range(len(g) // 150)]))
                        for g in (gb, ga))
    assert not (gb[order_b][1:] >= gb[order_b][:-1]).all()  # really interleaved
    interleaved = cmp.stats.group_permutation_tests(b[order_b], a[order_a], gb[order_b], ga[order_a],
                                                    rng=np.random.default_rng(5), n_perm=999)
    assert interleaved == by_run
    assert by_run["perm_ks_p"] < 0.01 and not by_run["permutation_exact"]


@pytest.mark.filterwarnings("ignore:p-value capped")
def test_permutation_statistics_match_scipy():
    rng = np.random.default_rng(32)
    b, a = rng.normal(0, 1, 37), rng.normal(0.3, 1.5, 41)
    z = np.concatenate([b, a])
    order = np.argsort(z, kind="stable")
    codes = np.r_[np.zeros(len(b), int), np.ones(len(a), int)][order]
    zs = z[order]
    dev = np.abs(zs - np.median(zs))
    ks, ad, spread = cmp.stats._perm_statistics(np.array([[True, False]]), codes, dev, np.r_[zs[1:] != zs[:-1], True])[0]
    assert ks == pytest.approx(stats.ks_2samp(b, a).statistic)
    # scipy reports the k-sample A2 standardised (Scholz & Stephens 1987): (A2 - (k - 1)) / sigma_N.
    n, k, big_h = len(z), 2, 1 / len(b) + 1 / len(a)
    h = np.sum(1 / np.arange(1, n))
    g = sum(np.sum(1 / ((n - i) * np.arange(i + 1, n))) for i in range(1, n - 1))
    c1 = (4 * g - 6) * (k - 1) + (10 - 6 * g) * big_h
    c2 = (2 * g - 4) * k ** 2 + 8 * h * k + (2 * g - 14 * h - 4) * big_h - 8 * h + 4 * g - 6
    c3 = (6 * h + 2 * g - 2) * k ** 2 + (4 * h - 4 * g + 6) * k + (2 * h - 6) * big_h + 4 * h
    c4 = (2 * h + 6) * k ** 2 - 4 * h * k
    sigma = np.sqrt((c1 * n ** 3 + c2 * n ** 2 + c3 * n + c4) / ((n - 1) * (n - 2) * (n - 3)))
    assert (ad - (k - 1)) / sigma == pytest.approx(stats.anderson_ksamp([b, a], variant="right").statistic)
    assert spread == pytest.approx(abs(np.abs(b - np.median(z)).mean() - np.abs(a - np.median(z)).mean()))


# --- the command: outputs and exit codes ---------------------------------------------------------

@pytest.fixture
def planted_files(tmp_path):
    rng = np.random.default_rng(10)
    before = pd.concat([samples("osu", "latency", rng.normal(10, 0.4, 200)),
                        samples("osu", "bandwidth", rng.normal(10, 0.3, 200), unit="GB/s"),
                        samples("app", "time", rng.normal(100, 2, 120), unit="s")])
    after = pd.concat([samples("osu", "latency", rng.normal(10.6, 0.4, 200)),
                       samples("osu", "bandwidth", rng.normal(10, 0.3, 200), unit="GB/s"),
                       samples("app", "time", rng.normal(100, 6, 120), unit="s")])
    reference = samples("osu", "latency", rng.normal(9.8, 0.3, 200))
    before.to_csv(tmp_path / "before.csv", index=False)
    after.to_parquet(tmp_path / "after.parquet")
    reference.to_csv(tmp_path / "orig.csv", index=False)
    return tmp_path


def test_cli_writes_table_summary_and_figures_and_exits_1_on_regression(planted_files, capsys):
    d = planted_files
    code = main(["compare", str(d / "before.csv"), str(d / "after.parquet"), "--reference", str(d / "orig.csv"),
                 "--out", str(d / "out")])
    printed = capsys.readouterr().out
    assert code == 1
    assert re.search(r"osu\s+latency\s+200/200.*slower", printed)
    assert "REGRESSION" in printed and "app / time: changed shape" in printed

    table = pd.read_csv(d / "out" / "compare.csv").set_index(["test", "variable"])
    assert table.loc[("osu", "latency"), "verdict"] == "slower"
    assert table.loc[("osu", "bandwidth"), "verdict"] == "unchanged"
    assert table.loc[("osu", "bandwidth"), "better"] == "higher"
    assert table.loc[("app", "time"), "verdict"] == "changed shape"
    assert 4 < table.loc[("osu", "latency"), "shift_pct"] < 8 and table.loc[("osu", "latency"), "shift_ci_low"] > 2
    assert table.loc[("osu", "latency"), "n_modes_before"] == 1

    summary = strict_json(d / "out" / "summary.json")
    assert summary["exit_code"] == 1 and summary["regression"] is True
    assert summary["verdicts"] == {"unchanged": 1, "faster": 0, "slower": 1, "changed shape": 1, "not compared": 0}
    assert {(r["test"], r["variable"]) for r in summary["regressions"]} == {("osu", "latency"), ("app", "time")}
    assert summary["before"]["kind"] == "file" and summary["after"]["samples"] == 520
    assert summary["reference"]["samples"] == 200 and summary["settings"]["correction"] == "holm"
    pair = next(p for p in summary["pairs"] if p["variable"] == "latency")
    assert pair["modes_before"][0]["weight"] == pytest.approx(1.0) and pair["verdict"] == "slower"
    # One PDF+CDF figure per pair, drawn as SVG: two panels, three curves where a reference is given.
    figures = {p["variable"]: d / "out" / p["figure"] for p in summary["pairs"]}
    assert len(figures) == 3
    for variable, path in figures.items():
        root = ET.parse(path).getroot()
        assert root.tag.endswith("svg")
        axes = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("id", "").startswith("axes_")]
        assert len(axes) == 2, variable
    curves = lambda p: sum(1 for g in ET.parse(p).getroot().iter("{http://www.w3.org/2000/svg}g")
                           if re.fullmatch(r"(patch|line2d)_\d+", g.get("id", "")))
    assert curves(figures["latency"]) > curves(figures["bandwidth"])  # reference drawn for latency only


def test_cli_fail_on_chooses_what_counts_as_a_regression(planted_files, capsys):
    d = planted_files
    args = ["compare", str(d / "before.csv"), str(d / "after.parquet"), "--no-figures"]
    assert main(args + ["--fail-on", "none"]) == 0
    assert main(args + ["--fail-on", "changed-shape"]) == 1
    assert main(args + ["--fail-on", "faster"]) == 0
    assert main(args + ["--fail-on", "slower", "--min-effect", "10"]) == 0  # a 6% shift is below 10%
    assert main(args + ["--fail-on", "quicker"]) == 2
    assert "unknown verdict 'quicker'" in capsys.readouterr().err


def test_run_returns_the_result_it_writes(planted_files):
    """``run()`` is the entry point, as the other analyses': the typed result it returns is the
    summary.json it wrote, with each pair's figure found through it."""
    d = planted_files
    result = cmp.run(d / "before.csv", d / "after.parquet", d / "out", {"min_effect": 10.0}, reference=d / "orig.csv",
                     fail_on="slower")
    assert isinstance(result, CompareResult) and result.settings.min_effect == 10.0
    assert result.settings.correction == "holm" and result.fail_on == ["slower"]
    assert result.before.kind == "file" and result.reference.samples == 200
    # A 6% shift is below a 10% min_effect: nothing is slower, so no regression on slower alone.
    assert result.verdicts["slower"] == 0 and result.exit_code == 0 and not result.regression
    assert CompareResult.read(d / "out").dump() == result.dump() == json.loads((d / "out" / "summary.json").read_text())
    for pair in result.pairs:
        assert result.figure(pair) == d / "out" / pair.figure and result.figure(pair).is_file()
    # Without an output directory nothing is written and no figure is drawn.
    printed = cmp.run(d / "before.csv", d / "after.parquet", fail_on="slower")
    assert [(p.test, p.variable, p.figure) for p in printed.pairs] == [(p.test, p.variable, None) for p in result.pairs]
    assert printed.exit_code == 1  # the default min_effect (2%) calls the 6% shift slower
    with pytest.raises(SettingsError, match="alpha"):
        cmp.run(d / "before.csv", d / "after.parquet", config={"alpha": 2})
    with pytest.raises(SettingsError, match="unknown setting 'n_boots'"):
        cmp.run(d / "before.csv", d / "after.parquet", config={"n_boots": 10})


def _compare_parser():
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    return sub.choices["compare"]


def test_cli_settings_options_are_the_compare_settings():
    """Every CompareSettings field is an option (``--min-effect``, or its ``cli`` name), and no
    other option is a setting: a new setting appears on the command line by itself."""
    parser = _compare_parser()
    others = {"before_source", "after_source", "before", "after", "reference", "out", "fail_on", "higher_is_better",
              "lower_is_better", "reframe_config", "no_figures", "help", "set"}
    options = {a.dest: a for a in parser._actions}
    assert set(options) - others == set(CompareSettings.model_fields)
    for key, info in CompareSettings.model_fields.items():
        flag = (info.json_schema_extra or {}).get("cli") or "--" + key.replace("_", "-")
        assert options[key].option_strings == [flag]
        assert f"(default {info.default})" in options[key].help
    assert options["n_perm"].option_strings == ["--permutations"]
    # No option given: exactly the defaults; each option sets its own field.
    from hpcvar.settings import from_options
    assert from_options(parser.parse_args(["b.csv", "a.csv"]), CompareSettings) == CompareSettings()
    given = from_options(parser.parse_args(["b.csv", "a.csv", "--min-effect", "10", "--permutations", "99",
                                            "--independent", "--seed", "3"]), CompareSettings)
    assert given == CompareSettings(min_effect=10.0, n_perm=99, independent=True, seed=3)


def test_cli_refuses_settings_out_of_bounds_naming_them(planted_files, capsys):
    d = planted_files
    code = main(["compare", str(d / "before.csv"), str(d / "after.parquet"), "--alpha", "2", "--out", str(d / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcvar compare: ") and re.search(r"\balpha\b.*less than 1", err)
    assert not (d / "out").exists()


def test_default_reframe_config_is_relative_to_the_current_directory(tmp_path, monkeypatch, capsys):
    """No repository is looked for: from elsewhere the default configuration is missing, and the
    message names it, the option and the directory it was looked for in."""
    monkeypatch.chdir(tmp_path)
    uuid = "00000000-0000-4000-8000-000000000000"
    assert main(["compare", f"reframe:{uuid}", f"reframe:{uuid}"]) == 2
    err = capsys.readouterr().err
    assert (f"reframe:{uuid}: ReFrame configuration config/reframe/settings.py not found (--reframe-config; "
            f"relative to the current directory {tmp_path})") in err


def test_cli_exit_0_on_identical_draws_over_many_pairs(tmp_path):
    before, after = _null_pairs(11)
    before.to_csv(tmp_path / "b.csv", index=False)
    after.to_csv(tmp_path / "a.csv", index=False)
    proc = subprocess.run([HPCVAR, "compare", str(tmp_path / "b.csv"), str(tmp_path / "a.csv"),
                           "--alpha", "0.05", "--out", str(tmp_path / "out"), "--no-figures"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "40 unchanged; no regression" in proc.stdout
    assert strict_json(tmp_path / "out" / "summary.json")["verdicts"]["unchanged"] == 40


GOOD = "test,variable,value,unit\nosu,latency,1.5,us\nosu,latency,1.6,us\n"


@pytest.mark.parametrize("name, text, expected", [
    ("value.csv", GOOD + "osu,latency,fast,us\n", r"value\.csv:4: value 'fast' is not a finite number"),
    ("blank.csv", GOOD + "\nosu,latency,,us\n", r"blank\.csv:5: value '' is not a finite number"),
    ("column.csv", "test,value\nosu,1.5\n", r"column\.csv:1: missing column variable"),
    ("empty.csv", "", r"empty\.csv:1: file is empty"),
    ("header.csv", "test,variable,value\n", r"header\.csv:1: no samples"),
    ("fields.csv", GOOD + "osu,latency,1.7,us,extra\n", r"fields\.csv:4: 5 fields, the header has 4"),
    ("better.csv", "test,variable,value,better\nx,t,1,lower\nx,t,2,faster\n",
     r"better\.csv:3: better must be 'lower' or 'higher'"),
    ("clash.csv", "test,variable,value,better\nx,t,1,lower\nx,t,2,higher\n",
     r"clash\.csv:3: variable 't' has better=higher here but better=lower on an earlier row"),
    ("report.json", '{"session_info": {}}\n', r"report\.json:1: missing columns test,variable,value"),
    ("binary.csv", b"\xff\xfe\x00\x01garbage", r"binary\.csv: not a text file"),
    ("absent.csv", None, r"absent\.csv: no such file"),
])
def test_bad_input_names_file_and_line_exits_2_and_writes_nothing(tmp_path, capsys, name, text, expected):
    good = tmp_path / "good.csv"
    good.write_text(GOOD + "".join(f"osu,latency,{1.5 + i / 100},us\n" for i in range(10)))
    bad = tmp_path / name
    if isinstance(text, bytes):
        bad.write_bytes(text)
    elif text is not None:
        bad.write_text(text)
    assert main(["compare", str(good), str(bad), "--out", str(tmp_path / "out")]) == 2
    assert re.search(expected, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_bad_parquet_names_the_row(tmp_path):
    pd.DataFrame({"test": ["a", "a", "a"], "variable": "v", "value": ["1.0", "2.0", "n/a"]}).to_parquet(
        tmp_path / "bad.parquet")
    with pytest.raises(cmp.ParseError, match=r"bad\.parquet: row 3: value 'n/a' is not a finite number"):
        cmp.load_samples(tmp_path / "bad.parquet")
    (tmp_path / "fake.parquet").write_text("test,variable,value\n")
    with pytest.raises(cmp.ParseError, match=r"fake\.parquet: not a readable Parquet file"):
        cmp.load_samples(tmp_path / "fake.parquet")


def test_nothing_in_common_is_bad_input(tmp_path, capsys):
    samples("a", "v", np.arange(10.0)).to_csv(tmp_path / "b.csv", index=False)
    samples("b", "v", np.arange(10.0)).to_csv(tmp_path / "a.csv", index=False)
    assert main(["compare", str(tmp_path / "b.csv"), str(tmp_path / "a.csv")]) == 2
    assert "nothing to compare" in capsys.readouterr().err


# --- date ranges of a collated dataset -----------------------------------------------------------

def test_parse_range():
    start, end = cmp.parse_range("2026-01-01..2026-01-15")
    assert start == pd.Timestamp("2026-01-01", tz="UTC")
    assert end == pd.Timestamp("2026-01-15 23:59:59.999999", tz="UTC")  # the end date is included
    start, end = cmp.parse_range("2026-01-16T06:00+02:00..")
    assert start == pd.Timestamp("2026-01-16 04:00", tz="UTC") and end is None
    assert cmp.parse_range("2026-01-03") == (pd.Timestamp("2026-01-03", tz="UTC"),
                                              pd.Timestamp("2026-01-03 23:59:59.999999", tz="UTC"))
    with pytest.raises(ValueError, match="not a date range"):
        cmp.parse_range("last week")
    with pytest.raises(ValueError, match="ends before it starts"):
        cmp.parse_range("2026-02-01..2026-01-01")


def _campaign(path: Path) -> None:
    """MILC runs once a day from 2025-12-20 to 2026-02-01, 8% slower from 2026-01-16, and
    Allreduce latencies of a microbenchmark whose spread triples from 2026-01-16 at the same
    median. Run 2026-01-15T23:30 belongs to the BEFORE window (the end date is inclusive)."""
    rng = np.random.default_rng(20)
    days = list(pd.date_range("2025-12-20 12:00", "2026-02-01 12:00", freq="D", tz="UTC"))
    days.append(pd.Timestamp("2026-01-15 23:30", tz="UTC"))
    runs, steps, lat = [], [], []
    common = dict(system="sim", num_nodes=4, user="user-0a1b2c3d4e", state="COMPLETED",
                  node_list=["nid00000", "nid00001"], num_routers=1, num_groups=1, locality="single-router")
    for k, start in enumerate(days):
        after = start >= pd.Timestamp("2026-01-16", tz="UTC")
        factor = (1.08 if after else 1.0) * rng.normal(1, 0.02)
        durations = [(5 + s % 3) * factor * rng.normal(1, 0.01) for s in range(10)]
        rid = f"sim-{1000 + k}"
        runs.append(dict(run_id=rid, app="milc", dataset="milc-4", job_id=str(1000 + k), start=start,
                         end=start + pd.Timedelta(seconds=80), total_time_s=sum(durations), num_steps=10, **common))
        steps += [dict(run_id=rid, step=s + 1, duration_s=d) for s, d in enumerate(durations)]
        mid = f"sim-{5000 + k}"
        runs.append(dict(run_id=mid, app="collectives", dataset="collectives-2", job_id=str(5000 + k),
                         start=start + pd.Timedelta(minutes=5), end=start + pd.Timedelta(minutes=6),
                         total_time_s=60.0, num_steps=0, **common))
        sigma = 0.15 if after else 0.05
        lat += [dict(run_id=mid, benchmark="collectives", operation="allreduce", size_bytes=8, pair="", cycle=0,
                     iteration=i, value_us=v) for i, v in enumerate(20 * rng.lognormal(0, sigma, 60))]
        lat += [dict(run_id=mid, benchmark="collectives", operation="bcast", size_bytes=1024, pair="", cycle=0,
                     iteration=i, value_us=v) for i, v in enumerate(rng.normal(30, 1, 60))]
    Dataset(path).append({"runs": pd.DataFrame(runs), "steps": pd.DataFrame(steps), "latency": pd.DataFrame(lat)})


def test_dataset_date_ranges(tmp_path, capsys):
    ds = tmp_path / "dataset"
    _campaign(ds)
    code = main(["compare", str(ds), "--before", "2026-01-01..2026-01-15", "--after", "2026-01-16..2026-02-01",
                 "--reference", "2025-12-20..2025-12-31", "--out", str(tmp_path / "out")])
    assert code == 1, capsys.readouterr()
    t = pd.read_csv(tmp_path / "out" / "compare.csv").set_index(["test", "variable"])
    assert t.loc[("milc-4", "run_time_s"), "n_before"] == 16  # 15 noon runs and the one at 23:30
    assert t.loc[("milc-4", "run_time_s"), "n_after"] == 17
    assert t.loc[("milc-4", "run_time_s"), "verdict"] == "slower"
    assert t.loc[("milc-4", "run_time_s"), "shift_ci_low"] < 8 < t.loc[("milc-4", "run_time_s"), "shift_ci_high"]
    assert t.loc[("milc-4", "step_time_rel"), "verdict"] == "slower"
    assert t.loc[("milc-4", "step_time_rel"), "n_before"] == 160
    assert t.loc[("collectives-2", "allreduce_8B_us"), "verdict"] == "changed shape"
    assert t.loc[("collectives-2", "allreduce_8B_us"), "n_after"] == 17 * 60
    assert t.loc[("collectives-2", "bcast_1024B_us"), "verdict"] == "unchanged"
    assert ("collectives-2", "run_time_s") not in t.index  # microbenchmark runs have no steps
    summary = strict_json(tmp_path / "out" / "summary.json")
    assert summary["before"]["kind"] == "dataset"
    assert summary["before"]["range"].startswith("2026-01-01T00:00:00+00:00..2026-01-15T23:59:59")
    assert summary["reference"]["range"].startswith("2025-12-20")
    # An open-ended AFTER range; only speed-ups fail this gate, and there are none.
    assert main(["compare", str(ds), "--before", "2026-01-01..2026-01-15", "--after", "2026-01-16..",
                 "--fail-on", "faster", "--no-figures"]) == 0
    capsys.readouterr()
    assert main(["compare", str(ds), "--before", "2026-03-01..2026-03-31", "--after", "2026-01-16.."]) == 2
    assert re.search(r"no runs started in 2026-03-01.*the dataset's runs started 2025-12-20",
                     capsys.readouterr().err)
    assert main(["compare", str(ds), "--before", "2026-01-01..2026-01-15"]) == 2
    assert "needs both --before and --after" in capsys.readouterr().err


def test_round_ranges_take_the_runs_that_started_in_a_rounds_first_second(tmp_path, capsys):
    """``round:A..B``: the rounds' ReFrame sessions start at fractions of a second, Slurm's
    accounting gives the runs' starts in whole seconds. The first job of a round often starts
    within the session's first second (CI's 16-round testbed campaign lost such a run from its
    AFTER window, 2026-11-30): it belongs to its round, not to the gap before it."""
    t0 = pd.Timestamp("2026-11-30 08:40", tz="UTC").timestamp()
    sessions = {"001": (t0 + 0.4, t0 + 30.7), "002": (t0 + 40.6, t0 + 70.2), "003": (t0 + 80.3, t0 + 110.9)}
    runs, lat = [], []
    common = dict(system="testbed", num_nodes=4, user="user-0a1b2c3d4e", state="COMPLETED", node_list=["n01", "n04"],
                  num_routers=2, num_groups=2, locality="multi-group", app="collectives", dataset="collectives-4",
                  total_time_s=10.0, num_steps=0)
    rng = np.random.default_rng(3)
    for name, (start, end) in sessions.items():
        (tmp_path / "rounds" / name).mkdir(parents=True)
        (tmp_path / "rounds" / name / "reframe-report.json").write_text(json.dumps(
            {"session_info": {"time_start_unix": start, "time_end_unix": end}, "runs": []}))
        for offset in (0, 15):  # the first job within the session's first second, as sacct gives it
            rid = f"testbed-{len(runs) + 100}"
            begin = pd.Timestamp(int(start) + offset, unit="s", tz="UTC")
            runs.append(dict(run_id=rid, job_id=str(len(runs) + 100), start=begin,
                             end=begin + pd.Timedelta(seconds=10), **common))
            lat += [dict(run_id=rid, benchmark="collectives", operation="allreduce", size_bytes=65536, pair="", cycle=0,
                         iteration=i, value_us=v) for i, v in enumerate(rng.normal(40 if name == "001" else 120, 2, 20))]
    Dataset(tmp_path / "dataset").append({"runs": pd.DataFrame(runs), "latency": pd.DataFrame(lat)})
    code = main(["compare", str(tmp_path / "dataset"), "--before", "round:001..001", "--after", "round:002..003",
                 "--out", str(tmp_path / "out"), "--no-figures", "--min-samples", "5"])
    # Two runs against four: too few to exchange whole runs to significance, so no verdict.
    assert code == 0, capsys.readouterr()
    t = pd.read_csv(tmp_path / "out" / "compare.csv").set_index(["test", "variable"])
    row = t.loc[("collectives-4", "allreduce_65536B_us")]
    assert (row["n_before"], row["n_after"], row["groups_before"], row["groups_after"]) == (2 * 20, 4 * 20, 2, 4)
    # The range opens at the session's whole second and ends at its end.
    summary = strict_json(tmp_path / "out" / "summary.json")
    assert summary["before"]["range"] == (f"{pd.Timestamp(int(t0), unit='s', tz='UTC').isoformat()}.."
                                          f"{pd.Timestamp(t0 + 30.7, unit='s', tz='UTC').isoformat()}")


# --- ReFrame sessions ----------------------------------------------------------------------------

TINY_TEST = '''
import os
import random

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import performance_function, run_before, sanity_function


@rfm.simple_test
class TinyLatency(rfm.RunOnlyRegressionTest):
    """Prints a latency drawn around 10 us (+ TINY_SHIFT) and a bandwidth around 100 GB/s."""

    descr = "throw-away test for hpcvar compare"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    executable = "echo"

    @run_before("run")
    def draw(self):
        self.job.launcher = getlauncher("local")()  # no mpirun needed for echo
        rng = random.Random(f"{os.environ['TINY_SEED']}-{self.unique_name}")
        shift = float(os.environ.get("TINY_SHIFT", "0"))
        self.executable_opts = [f"latency {rng.gauss(10 + shift, 0.3):.4f} bandwidth {rng.gauss(100, 2):.3f}"]

    @sanity_function
    def printed(self):
        return sn.assert_found(r"latency \\S+ bandwidth", self.stdout)

    @performance_function("us")
    def latency(self):
        return sn.extractsingle(r"latency (\\S+)", self.stdout, 1, float)

    @performance_function("GB/s")
    def bandwidth(self):
        return sn.extractsingle(r"bandwidth (\\S+)", self.stdout, 1, float)
'''


def test_reframe_sessions(tmp_path):
    check = tmp_path / "tiny_check.py"
    check.write_text(TINY_TEST)
    env = {**os.environ, "HPCVAR_RFM_PREFIX": str(tmp_path / "rfm"), "HPCVAR_RFM_DB": str(tmp_path / "results.db")}
    config = REPO / "config" / "reframe" / "settings.py"

    def session(seed, shift, *options) -> str:
        proc = subprocess.run([REFRAME, "-C", str(config), "--nocolor", "--system", "local", "-c", str(check), "-r",
                               *options], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                              env={**env, "TINY_SEED": str(seed), "TINY_SHIFT": str(shift)})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return re.search(r"session stored with UUID: (\S+)", proc.stdout).group(1)

    before = session(1, 0.0, "--repeat", "20")
    after_a = session(2, 0.8, "--repeat", "5", "--reruns", "1")  # reruns: two runs of 5 in one session
    after_b = session(3, 0.8, "--repeat", "10")

    frame = cmp.reframe_samples(before, config, env=env)
    assert len(frame) == 40 and set(frame["test"]) == {"TinyLatency @local:default+gnu-openmpi"}
    assert dict(frame.groupby("variable")["unit"].first()) == {"bandwidth": "GB/s", "latency": "us"}

    out = tmp_path / "out"
    proc = subprocess.run([HPCVAR, "compare", f"reframe:{before}", f"reframe:{after_a},{after_b}",
                           "--reframe-config", str(config), "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    t = pd.read_csv(out / "compare.csv").set_index("variable")
    assert t.loc["latency", "verdict"] == "slower"
    assert t.loc["latency", "n_before"] == 20 and t.loc["latency", "n_after"] == 20
    assert t.loc["latency", "shift_ci_low"] < 8 < t.loc["latency", "shift_ci_high"]
    assert t.loc["bandwidth", "verdict"] == "unchanged" and t.loc["bandwidth", "better"] == "higher"
    assert strict_json(out / "summary.json")["after"]["kind"] == "reframe"

    # Same system, same software: no regression between the two AFTER sessions.
    proc = subprocess.run([HPCVAR, "compare", f"reframe:{after_a}", f"reframe:{after_b}", "--reframe-config",
                           str(config), "--min-samples", "5"], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    unknown = "00000000-0000-4000-8000-000000000000"
    proc = subprocess.run([HPCVAR, "compare", f"reframe:{before}", f"reframe:{unknown}", "--reframe-config",
                           str(config)], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 2 and f"reframe:{unknown}: no stored session matches" in proc.stderr
