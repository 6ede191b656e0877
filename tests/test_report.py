"""The HTML report: built from the dataset and the analyses' summaries, anonymised by default,
graceful when a section has no data, and checked in a real browser (Debian's Chromium, headless)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from hpcvar.report import SECTIONS, build
from hpcvar.util.anonymise import PSEUDONYM, Pseudonymiser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_sections_without_analyses_say_so(campaign, tmp_path):
    c = campaign("demo", 0, 15)
    result = build(c.dataset, tmp_path / "report.html", figures_dir=tmp_path / "figures")
    secs = result["sections"]
    for name in ("findings", "campaign", "datasets", "neighbourhood", "deviation", "forecast", "placement",
                 "background", "distributions", "regression", "explained", "interference"):
        assert secs[name]["empty"] and not secs[name]["figures"], name
    html = (tmp_path / "report.html").read_text()
    assert "No neighbourhood analysis summary" in html and "No distributions analysis summary" in html
    assert "No overview analysis summary (run `hpcvar overview`)" in html
    assert "No data: no regression check was configured" in html
    # Offline: nothing is fetched from anywhere.
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_overview_sections_show_the_analysis_numbers_and_figures(campaign, tmp_path):
    """The campaign, per-dataset and placement sections render `hpcvar overview`'s result: its
    figures copied, its numbers quoted (the report computes nothing of its own)."""
    from hpcvar.analyses import overview

    c = campaign("demo", 0, 15)
    res = overview.run(c.dataset, tmp_path / "analyses" / "overview")
    result = build(c.dataset, tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    secs = result["sections"]
    runs = pd.read_parquet(c.dataset / "runs")
    datasets = sorted(runs["dataset"].unique())
    # One step-spread, MPI (where profiled) and placement figure per dataset, two campaign figures.
    assert len(secs["campaign"]["figures"]) == 2
    assert {Path(f).parent.name for f in secs["placement"]["figures"]} == set(datasets)
    with_steps = set(runs.loc[runs["num_steps"] > 0, "dataset"])
    assert with_steps and {Path(f).parent.name for f in secs["datasets"]["figures"]} == with_steps
    html = (tmp_path / "report.html").read_text()
    # The campaign reading quotes the same ratio summary.txt shows, and the analysis's share of slow runs.
    ratio = (runs.groupby("dataset")["total_time_s"].max() / runs.groupby("dataset")["total_time_s"].min())
    assert f"the slowest run took {ratio.max():.2f}x as long as the fastest" in html
    best = runs.groupby("dataset")["total_time_s"].transform("min")
    share = (runs["total_time_s"] / best > 1.5).mean()
    assert res.campaign.share_slow == pytest.approx(share)
    assert f"{100 * share:.0f}% of all runs took more than 1.5x their dataset" in html
    # An overview from before the last collation (a dataset it does not know) is said to be stale,
    # not a crash; a ratio it could not compute (a 0 s run) is n/a.
    summary = tmp_path / "analyses" / "overview" / "summary.json"
    doc = json.loads(summary.read_text())
    gone = datasets[0]
    del doc["datasets"][gone]
    doc["spread"] = [r for r in doc["spread"] if r["dataset"] != gone]
    doc["spread"][0]["slowest_fastest"] = None
    summary.write_text(json.dumps(doc))
    stale = build(c.dataset, tmp_path / "stale.html", analyses_dir=tmp_path / "analyses",
                  figures_dir=tmp_path / "figures-stale")
    text = (tmp_path / "stale.html").read_text()
    assert "Not in the overview&#39;s result (collated after it ran)" in text or \
        "Not in the overview's result (collated after it ran)" in text
    assert gone not in {Path(f).parent.name for f in stale["sections"]["placement"]["figures"]}
    assert "n/ax as long as the fastest" in text


def test_interference_section_reads_the_experiments_tables(campaign, tmp_path):
    """The section shows what `hpcvar interference simulate` wrote: per job a slowdown table and
    figures per policy, and a reading quoting the smallest and largest latency slowdown."""
    from hpcvar.analyses.interference import draw_figures
    from hpcvar.simulate.interference import simulate_experiment

    c = campaign("demo", 0, 15)
    exp = Path(__file__).resolve().parents[1] / "config" / "experiments" / "interference.yaml"
    simulate_experiment(exp, tmp_path / "analyses" / "interference", {
        "repetitions": 1, "samples": 8, "policies": ["random-nodes", "random-groups"]}, progress=False)
    draw_figures(tmp_path / "analyses" / "interference")  # what `hpcvar interference simulate` does after
    result = build(c.dataset, tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    sec = result["sections"]["interference"]
    jobs = pd.read_csv(tmp_path / "analyses" / "interference" / "jobs.csv")
    assert not sec["empty"]
    names = {str(Path(f).relative_to(tmp_path / "figures" / "interference")) for f in sec["figures"]}
    assert names == {f"{j}/{n}.svg" for j in jobs["job"].unique()
                     for n in ("slowdowns", "latency_minimal", "latency_adaptive")}
    html = (tmp_path / "report.html").read_text()
    victim = jobs[jobs["role"] == "victim"].groupby(["policy", "routing"], sort=False)["slowdown_latency"].median()
    low, high = victim.idxmin(), victim.idxmax()
    assert (f"Latency slowdown from {victim[low]:.2f}x ({low[0]}, {low[1]}) to {victim[high]:.2f}x "
            f"({high[0]}, {high[1]})") in html
    assert "What-if on the simulated dragonfly" in html


def test_interference_section_reads_a_real_experiments_result(campaign, tmp_path):
    """In slurm mode the section reads the summary `hpcvar interference analyse` wrote, through the
    same result class as the simulation's, and says how many runs the experiment collated."""
    from test_interference import _real_experiment

    from hpcvar.analyses.interference import analyse

    c = campaign("demo", 0, 15)
    _real_experiment(tmp_path / "exp")
    result = analyse(tmp_path / "exp", tmp_path / "analyses" / "interference")
    report = build(c.dataset, tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    sec = report["sections"]["interference"]
    assert not sec["empty"] and {Path(f).parent.name for f in sec["figures"]} == {"coll", "noise"}
    html = (tmp_path / "report.html").read_text()
    assert f"A real experiment on the cluster ({result.runs.collated} runs" in html
    assert "experiment hand:" in html and result.notes[0] in html


def test_distribution_sections_read_the_result_and_its_figures(campaign, tmp_path):
    """The background and distributions sections show the figures the result names (the files the
    analysis drew), and a summary.json of another shape stops the report, naming the file."""
    from hpcvar.analyses import distributions
    from hpcvar.results import ResultError
    from hpcvar.results.distributions import Conditions, HistogramSummary, Histograms

    c = campaign("demo", 0, 15)
    result = distributions.run(c.dataset, tmp_path / "analyses" / "distributions")
    report = build(c.dataset, tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    shown = {sid: {(Path(f).parent.name, Path(f).name) for f in report["sections"][sid]["figures"]}
             for sid in ("background", "distributions")}
    expect = {"background": set(), "distributions": set()}
    for name, d in result.datasets.items():
        if d.conditions.groups:
            first = d.conditions.variables[0]
            expect["background"] |= {(name, Conditions.figure_file(cond, first)) for cond in ("b", "locality")}
        if d.kind == "application":
            expect["distributions"].add((name, d.STEP_RATIO_FIGURE))
            continue
        expect["distributions"] |= {(name, g.figure) for g in d.latency or []}
        h = d.histograms
        if h and isinstance(h.timer, HistogramSummary):
            expect["distributions"].add((name, Histograms.figure_file("timer")))
        if h and (isinstance(h.pairwise, HistogramSummary) or isinstance(h.minima, HistogramSummary)):
            expect["distributions"].add((name, Histograms.figure_file("pairwise")))
    assert shown == expect and expect["background"] and expect["distributions"]
    for sid in shown:
        for name, file in shown[sid]:
            copied = tmp_path / "figures" / sid / name / file
            assert copied.read_bytes() == result.dataset_file(name, file).read_bytes()
    html = (tmp_path / "report.html").read_text()
    app = next(d for d in result.datasets.values() if d.kind == "application")
    assert f"Step times span {app.step_ratio.p01:.2f}x to {app.step_ratio.p99:.2f}x" in html

    summary = tmp_path / "analyses" / "distributions" / "summary.json"
    summary.write_text(summary.read_text().replace('"step_ratio"', '"step_ratios"'))
    with pytest.raises(ResultError, match=re.escape(str(summary))):
        build(c.dataset, tmp_path / "again.html", analyses_dir=tmp_path / "analyses", figures_dir=tmp_path / "f2")


def test_failed_runs_are_counted_and_drawn(campaign, tmp_path):
    c = campaign("demo", 0, 15)
    failed = [json.loads(line) for line in (c.dataset / "quarantine.jsonl").read_text().splitlines()]
    failed = [e for e in failed if e["kind"] == "failed-run"]
    assert failed and all(e["start"] for e in failed)  # collate records when the failed job ran
    from hpcvar.analyses import overview

    res = overview.run(c.dataset, tmp_path / "analyses" / "overview")
    assert res.campaign.failed == len(failed) and sum(cov.failed for cov in res.coverage) == len(failed)
    build(c.dataset, tmp_path / "report.html", analyses_dir=tmp_path / "analyses", figures_dir=tmp_path / "figures")
    html = (tmp_path / "report.html").read_text()
    states = pd.Series([e["state"] for e in failed]).value_counts()
    assert f"{len(failed)} runs failed (" in html
    for state, n in states.items():
        assert f"{n} {state}" in html


def test_report_pseudonymises_a_dataset_collated_with_real_names(campaign, tmp_path):
    """A dataset collated with --no-anonymise still gives a report without user names."""
    from hpcvar.analyses import neighbourhood
    from hpcvar.collate import collate

    # Two days of the demo (the suite's small campaign): every user name still reaches the
    # dataset, the neighbourhood's top users and the report's figures; collating and reporting
    # 15 days took most of this test's time.
    c = campaign("demo", 3, 2)
    collate(c.raw, tmp_path / "dataset", Pseudonymiser(None, enabled=False))
    neigh = pd.read_parquet(tmp_path / "dataset" / "neighbourhood")
    real = set(neigh["user"])
    assert not any(PSEUDONYM.fullmatch(u) for u in real)
    summary = neighbourhood.run(tmp_path / "dataset", tmp_path / "analyses" / "neighbourhood")
    top = next(iter(summary.datasets.values())).top_users[0].user
    assert top in real

    salt = b"report-test-salt"
    build(tmp_path / "dataset", tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
          figures_dir=tmp_path / "figures", pseudo=Pseudonymiser(salt))
    html = (tmp_path / "report.html").read_text()
    texts = [html] + [f.read_text() for f in (tmp_path / "figures").rglob("*.svg")]
    for name in real:
        assert not any(re.search(rf"\b{re.escape(name)}\b", t) for t in texts), name
    assert Pseudonymiser(salt)(top) in html
    assert salt.decode() not in html
    # The analysis's figure labels the users by name: left out, saying why.
    assert "figure is left out: the dataset holds user names" in html
    assert not list((tmp_path / "figures" / "neighbourhood").rglob("top_users.svg"))

    # Switched off on request (private use): the names stay.
    build(tmp_path / "dataset", tmp_path / "named.html", analyses_dir=tmp_path / "analyses",
          figures_dir=tmp_path / "named", pseudo=None)
    assert top in (tmp_path / "named.html").read_text()
    assert list((tmp_path / "named" / "neighbourhood").rglob("top_users.svg"))


# --- the main job's report in a real browser ---------------------------------------------------------


@pytest.fixture(scope="module")
def page(main_job):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: the browser test needs Debian's chromium (./setup.sh installs it)")
    from playwright.sync_api import sync_playwright

    assert main_job.result.returncode == 0, main_job.result.stderr[-3000:]
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        pg.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        pg.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
        pg.on("request", lambda r: errors.append(f"request: {r.url}") if not r.url.startswith(("file:", "data:"))
              else None)
        pg.goto((main_job.results / "report.html").as_uri(), wait_until="load")
        yield pg, errors
        browser.close()


def check_glance(pg, sec, analyses: Path):
    """The first screen: one bar per dataset of explain's summary whose pieces are explain's shares
    of the slow runs' excess time (the neighbours by user), and beside it the regression check's
    verdicts; the whole of it within the first screen (1280 x 900)."""
    explain = json.loads((analyses / "explain" / "summary.json").read_text())["datasets"]
    assert sec.locator(".glance-row").evaluate_all("els => els.map(e => e.dataset.dataset)") == list(explain)
    totals = {}
    for name, d in explain.items():
        segs = sec.locator(f'.glance-row[data-dataset="{name}"] .seg').evaluate_all(
            "els => els.map(e => [e.dataset.category, parseFloat(e.dataset.seconds), e.title,"
            " e.getBoundingClientRect().width])")
        excess = d["slow_excess_s"]
        cats = {c["category"]: c["share"] * excess for c in d["categories"]}
        for category in ("network", "placement", "io", "load"):
            shown = [s for c, s, _, _ in segs if c == category]
            assert shown == ([pytest.approx(cats[category], abs=0.06)] if cats.get(category, 0) > 0 else []), name
        users = [(u["user"] or "other users", u["share"] * excess) for u in d["neighbours_by_user"]]
        shown = [(t.split("neighbours: ")[1].split(",")[0], s) for c, s, t, _ in segs if c == "neighbours"]
        assert shown == [(u, pytest.approx(v, abs=0.06)) for u, v in users if v > 0], name
        assert sum(s for _, s in shown) == pytest.approx(cats.get("neighbours", 0), abs=0.5)
        unexplained = [s for c, s, _, _ in segs if c == "unexplained"]
        assert unexplained == ([pytest.approx(d["unexplained_share"] * excess, abs=0.06)]
                               if d["unexplained_share"] else []), name
        totals[name] = (sum(s for _, s, _, _ in segs), sum(w for *_, w in segs))
    # Widths are proportional to seconds across the datasets: pixels per second the same on every bar.
    longest = max(totals, key=lambda n: totals[n][0])
    scale = totals[longest][1] / totals[longest][0]
    for name, (seconds, width) in totals.items():
        assert width == pytest.approx(seconds * scale, abs=len(explain) + 2), name
    compare = json.loads((analyses / "compare" / "summary.json").read_text())
    flagged = [(p["test"], p["variable"], p["verdict"]) for p in compare["pairs"] if p["verdict"] != "unchanged"]
    rows = sec.locator("[data-verdicts] tbody tr").evaluate_all(
        "els => els.map(r => Array.from(r.cells).slice(0, 3).map(c => c.textContent.trim()))")
    assert [tuple(r) for r in rows] == flagged and flagged  # the demo's upgrade changed the collectives
    unchanged = sum(p["verdict"] == "unchanged" for p in compare["pairs"])
    assert f"{unchanged} unchanged" in sec.locator("[data-verdicts]").inner_text()
    box = sec.locator("[data-glance]").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 900, box


def test_report_loads_without_errors_and_every_section_has_figures(page, main_job):
    pg, errors = page
    assert errors == []
    ids = pg.eval_on_selector_all("[data-section]", "els => els.map(e => e.dataset.section)")
    assert ids == list(SECTIONS)
    for sid in SECTIONS:
        sec = pg.locator(f'[data-section="{sid}"]')
        if sid == "provenance":
            text = sec.inner_text()
            assert "sqlite:///" in text and "mlflow ui --backend-store-uri" in text and "snakemake" in text
            # The MLflow UI started as docs/getting-started/mlflow.md starts it, with its variables.
            doc = next(ln for ln in (REPO / "docs" / "getting-started" / "mlflow.md").read_text().splitlines()
                       if "bin/mlflow ui " in ln)
            variables = doc.split(".venv/bin/mlflow")[0]
            assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in variables, doc
            assert f"{variables}mlflow ui --backend-store-uri sqlite:///" in text, text
            assert "preset: demo" in text  # the configuration the run used
            continue
        if sid == "findings":
            check_glance(pg, sec, main_job.results / "analyses")
            # Below it, one line per dataset, text only, each linking to evidence that is on the page.
            assert sec.locator("figure").count() == 0 and "slowest run took" in sec.inner_text()
            hrefs = sec.locator("a[href^='#']").evaluate_all("els => els.map(e => e.getAttribute('href'))")
            assert hrefs and all(pg.locator(f'[id="{h[1:]}"]').count() == 1 for h in hrefs), hrefs
            continue
        assert not sec.locator("[data-empty]").count(), sid  # the demo campaign has data for every section
        imgs = sec.locator("figure img")
        assert imgs.count() >= 1, sid
        # Every figure decoded to a real picture (a broken SVG has naturalWidth 0).
        sizes = imgs.evaluate_all("els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
        assert all(ok and w > 100 and h > 100 for ok, w, h in sizes), (sid, sizes)
    shot = main_job.results / "report-screenshot.png"
    pg.screenshot(path=str(shot), full_page=False)
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])
    assert (width, height) == (1280, 900)


def test_report_numbers_are_the_summaries_and_mlflow_numbers(page, main_job):
    """One source of truth: the MAPE the report shows is the one in summary.json and in MLflow."""
    import mlflow

    pg, _ = page
    summary = json.loads((main_job.results / "analyses" / "deviation" / "summary.json").read_text())
    rows = pg.locator('[data-section="deviation"] table').first.evaluate(
        "t => Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent.trim()))")
    header = pg.locator('[data-section="deviation"] table').first.evaluate(
        "t => Array.from(t.tHead.rows[0].cells).map(c => c.textContent.trim())")
    shown = {r[header.index("dataset")]: r[header.index("mape")] for r in rows}
    client = mlflow.MlflowClient(summary["mlflow"]["tracking_uri"])
    assert set(shown) == set(summary["datasets"])
    for name, d in summary["datasets"].items():
        assert shown[name] == f"{100 * d['mape']:.1f}%"
        logged = client.get_run(summary["mlflow"]["runs"][name]).data.metrics["mape"]
        assert logged == pytest.approx(d["mape"])
    # Each dataset's reading names the three counters selected in the most folds, with their shares.
    text = " ".join(pg.locator('[data-section="deviation"]').inner_text().split())
    for name, d in summary["datasets"].items():
        first, *then = d["relevance"][:3]
        expected = (f"{first['counter']} was selected in {100 * first['relevance']:.1f}% of the {d['folds']} folds"
                    + (", then " + " and ".join(f"{r['counter']} ({100 * r['relevance']:.1f}%)" for r in then)
                       if then else "") + ".")
        assert expected in text, (name, expected)


def test_report_tables_sort_on_click(page):
    pg, errors = page
    table = pg.locator('[data-section="campaign"] table').first
    header = table.evaluate("t => Array.from(t.tHead.rows[0].cells).map(c => c.textContent.trim())")
    col = header.index("max_s")
    table.locator("thead th").nth(col).click()
    values = table.evaluate(f"t => Array.from(t.tBodies[0].rows).map(r => r.cells[{col}].textContent)")
    numbers = [float(v.replace(",", "")) for v in values]
    assert numbers == sorted(numbers)
    table.locator("thead th").nth(col).click()
    values = table.evaluate(f"t => Array.from(t.tBodies[0].rows).map(r => r.cells[{col}].textContent)")
    assert [float(v.replace(",", "")) for v in values] == sorted(numbers, reverse=True)
    assert errors == []


def test_the_configuration_shown_pseudonymises_the_planted_users():
    """A testbed campaign's configuration names other users (campaign.background): the report's
    provenance shows it with their pseudonyms, as everywhere else in the report."""
    from hpcvar.report.build import Builder

    text = (REPO / "config" / "campaign-testbed.yaml").read_text()
    b = Builder.__new__(Builder)  # only the pseudonymiser is needed
    b.pseudo = Pseudonymiser(b"salt")
    shown = b.config_text(text)
    for user in ("hpcvar-alice", "hpcvar-bob", "hpcvar-carol", "hpcvar-dave"):
        assert user in text and user not in shown and b.pseudo(user) in shown
    b.pseudo = None  # `hpcvar report --no-anonymise`: names as they are
    assert b.config_text(text) == text
