"""The ``hpcvar`` command line: one subcommand per step of the pipeline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _kv(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--set expects FIELD=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def _processes(text: str) -> int:
    """``--workers N``: a count of processes, at least 1 (argparse names the option when not)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} processes: give 1 or more (leave the option out for one per usable core)")
    return n


def cmd_simulate(a) -> int:
    from hpcvar.simulate import RefusedOutput, simulate
    from hpcvar.util.cores import usable_cores

    try:
        overrides = {k: yaml_value(v) for k, v in _kv(a.set).items()}  # YAML, as every --set
        truth = simulate(a.preset, seed=a.seed, out=a.out, overrides=overrides, workers=a.workers or usable_cores())
    except RefusedOutput as exc:
        print(f"hpcvar simulate: {exc}", file=sys.stderr)
        return 2
    runs = sum(d["runs"] for d in truth["datasets"].values())
    mb = truth.get("microbenchmarks")
    extra = f" and {len(mb['runs'])} runs of the {mb['dataset']} microbenchmark" if mb else ""
    print(f"simulated {runs} runs of {len(truth['datasets'])} datasets{extra} on '{truth['system']}' -> {a.out}")
    return 0


def cmd_collate(a) -> int:
    from hpcvar.collate import check_systems, collate
    from hpcvar.data.summary import format_summary
    from hpcvar.parsers.errors import ParseError
    from hpcvar.util.anonymise import Pseudonymiser, load_salt

    from hpcvar.data.dataset import COLLATED, Dataset
    from hpcvar.data.schema import SchemaError
    from hpcvar.util.fileio import atomic_write_json

    pseudo = Pseudonymiser(load_salt(a.salt_file) if a.anonymise else None, enabled=a.anonymise)
    try:
        check_systems(a.raw, a.out, rebuild=a.rebuild)  # before --rebuild empties anything
        if a.rebuild:
            Dataset(a.out).clear()
        result = collate(a.raw, a.out, pseudo, workers=a.workers)
    except (ParseError, SchemaError) as exc:
        print(f"hpcvar collate: {exc}", file=sys.stderr)
        return 2
    r = result.as_dict()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(a.out) / COLLATED, {"raw": str(a.raw), "rebuilt": a.rebuild, **r}, default=str)
    print(f"collated {r['new_runs']} new runs ({r['skipped_already_collated']} already collated, "
          f"{len(r['incomplete'])} incomplete, {len(r['failed'])} failed, {len(r['quarantined'])} quarantined)")
    for q in result.quarantined:
        print(f"  quarantined: {q['error'] if 'error' in q else q}", file=sys.stderr)
    if a.summary:
        Path(a.summary).write_text(format_summary(a.out))
    return 0


def inspect_path(path: str) -> dict:
    """``parsers.inspect`` for a file; a dataset directory is described, any other one refused."""
    if not Path(path).is_dir():
        from hpcvar.parsers import inspect

        return inspect(path)
    from hpcvar.data.dataset import Dataset  # pandas: only for a dataset directory

    ds = Dataset(path)
    if ds.is_dataset():
        return {"file": str(path), "ok": True, **ds.describe()}
    return {"file": str(path), "ok": False,
            "error": "a directory, not a dataset (no runs table): give the files in it (hpcvar inspect DIR/*) "
                     "or a dataset directory that hpcvar collate wrote"}


def cmd_inspect(a) -> int:
    results = [inspect_path(p) for p in a.files]
    if a.json:
        print(json.dumps(results, indent=1, default=str))
    else:
        for r in results:
            if not r["ok"]:
                print(f"{r['file']}: ERROR {r['error']}")
                continue
            span = r.get("time_span")
            fmt = "" if r["kind"] == "dataset" else f" (format {r.get('format_version') or '?'})"
            print(f"{r['file']}: {r['kind']}{fmt}, {r['records']} {'runs' if r['kind'] == 'dataset' else 'records'}"
                  + (f", {span[0]} .. {span[1]}" if span else ""))
            for k, v in r.get("figures", {}).items():
                print(f"    {k}: {v}")
    return 0 if all(r["ok"] for r in results) else 1


def cmd_summary(a) -> int:
    from hpcvar.data.summary import format_summary

    text = format_summary(a.dataset)
    if a.out:
        Path(a.out).write_text(text)
    print(text, end="")
    return 0


def cmd_analysis(a) -> int:
    from hpcvar.analyses.registry import ANALYSES

    analysis = ANALYSES[a.cmd]
    config = {}
    if a.config:
        import yaml

        config = analysis_settings(yaml.safe_load(Path(a.config).read_text()) or {}, a.cmd)
    config.update({k: yaml_value(v) for k, v in _kv(a.set).items()})
    from hpcvar.settings import SettingsError

    try:  # refused here, naming the file, before the dataset is read
        settings = analysis.settings.from_mapping(config, a.config or "the --set options")
    except SettingsError as exc:
        raise SystemExit(f"hpcvar {a.cmd}: {exc}") from None
    only = getattr(a, "only", None)
    result = analysis.module.run(a.dataset, a.out, settings, only=only,
                                 **({"truth": a.truth} if analysis.takes_truth else {}))
    written = Path(a.out) / ("parts/" + f"{only}.json" if only else "summary.json")
    where = ""
    if analysis.tracked:  # hpcvar.tracking imports MLflow (about a second): only for the analyses that log
        from hpcvar import tracking

        where = f" (MLflow: {tracking.tracking_uri(a.dataset)}, experiment {tracking.experiment(a.cmd)})"
    print(f"{a.cmd}: {len(result.datasets)} datasets -> {written}{where}")
    return 0


def analysis_settings(doc: dict, name: str) -> dict:
    """The settings of analysis ``name`` in a YAML document: the workflow's configuration file
    (its ``analyses: {name: ...}`` section; none there: the defaults), a file with a ``name:``
    section, or a file of that analysis's settings alone."""
    if isinstance(doc.get("analyses"), dict):
        return dict(doc["analyses"].get(name) or {})
    if isinstance(doc.get(name), dict):
        return dict(doc[name])
    return dict(doc)


def yaml_value(text: str):
    """``--set`` values are YAML: numbers, lists (``[3, 8]``) and mappings work as in config.yaml."""
    import yaml

    return yaml.safe_load(text)


def cmd_explain(a) -> int:
    """One run explained (text, or JSON with --json); without RUN_ID, every run (--out)."""

    import yaml

    from hpcvar.analyses import explain
    from hpcvar.settings import ExplainSettings, SettingsError

    config = analysis_settings(yaml.safe_load(Path(a.config).read_text()) or {}, "explain") if a.config else {}
    config.update({k: yaml_value(v) for k, v in _kv(a.set).items()})
    try:
        settings = ExplainSettings.from_mapping(config, a.config or "the --set options")
        if a.run_id is None:
            if not a.out:
                raise SystemExit("hpcvar explain: name a RUN_ID, or --out DIR to explain every run")
            result = explain.run(a.dataset, a.out, settings, a.analyses, only=a.only)
            for d in result.datasets.values():
                print(d.finding)
            written = Path(a.out) / ("parts/" + f"{a.only}.json" if a.only else "summary.json")
            print(f"explain: {len(result.datasets)} datasets -> {written}")
            return 0
        e = explain.explain_run(explain.Context(a.dataset, a.analyses, settings), a.run_id)
    except (explain.ExplainError, SettingsError) as exc:
        print(f"hpcvar explain: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(e.model_dump(mode="json"), indent=1) if a.json else explain.render(e))
    return 0


def cmd_assemble(a) -> int:
    from hpcvar.analyses.assemble import assemble
    from hpcvar.results import ResultError

    try:
        result = assemble(a.analysis, a.out, a.parts)
    except ResultError as exc:
        print(f"hpcvar assemble: {exc}", file=sys.stderr)
        return 2
    print(f"assemble: {a.analysis}: {len(a.parts)} parts, {len(result.datasets)} datasets -> "
          f"{Path(a.out) / 'summary.json'}")
    return 0


def compare_settings(a):
    """``hpcvar compare``'s settings: ``--set KEY=VALUE`` (the workflow's way, as for every
    analysis), then the options (``--alpha``, ...), which win."""
    from hpcvar.settings import CompareSettings, from_options

    given = {**{k: yaml_value(v) for k, v in _kv(a.set).items()}, **from_options(a, CompareSettings, only_given=True)}
    return CompareSettings.from_mapping(given, "the --set options")


def cmd_compare(a) -> int:
    """Prints the table and the verdict counts; exit 0: no regression, 1: regression, 2: bad input."""
    from hpcvar.analyses import compare
    from hpcvar.parsers.errors import ParseError
    from hpcvar.settings import SettingsError

    try:
        result = compare.run(a.before_source, a.after_source, a.out, compare_settings(a),
                             before_range=a.before, after_range=a.after, reference=a.reference,
                             reframe_config=a.reframe_config, higher_is_better=a.higher_is_better,
                             lower_is_better=a.lower_is_better, figures=not a.no_figures,
                             **({"fail_on": a.fail_on} if a.fail_on is not None else {}))
    except (ParseError, compare.BadInput, SettingsError) as exc:
        print(f"hpcvar compare: {exc}", file=sys.stderr)
        return 2
    print(compare.format_table(result), end="")
    print("\n" + compare.counts_line(result, Path(a.out) / "summary.json" if a.out else None))
    return result.exit_code


def cmd_report(a) -> int:
    from hpcvar.report import build
    from hpcvar.results import ResultError
    from hpcvar.util.anonymise import Pseudonymiser, load_salt

    pseudo = Pseudonymiser(load_salt(a.salt_file)) if a.anonymise else None
    try:
        result = build(a.dataset, a.out, analyses_dir=a.analyses, figures_dir=a.figures, config_file=a.config,
                       pseudo=pseudo)
    except ResultError as exc:
        print(f"hpcvar report: {exc}", file=sys.stderr)
        return 2
    figures = sum(len(s["figures"]) for s in result["sections"].values())
    empty = [k for k, s in result["sections"].items() if s["empty"]]
    print(f"report: {a.out} ({result['bytes'] / 1e6:.1f} MB, {figures} figures"
          + (f"; no data for: {', '.join(empty)}" if empty else "") + f"); figures in {result['figures_dir']}")
    return 0


def cmd_import_reframe(a) -> int:
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.parsers.errors import ParseError

    try:
        r = import_reports(a.reports, a.raw, topology=a.topology, ldms_store=a.ldms, ldms_margin=a.ldms_margin)
        if a.summary:
            Path(a.summary).write_text(json.dumps({"imported": r.imported, "skipped": r.skipped,
                                                   "ignored": r.ignored, "errors": r.errors}, indent=1))
    except ParseError as exc:
        print(f"hpcvar import-reframe: {exc}", file=sys.stderr)
        return 2
    print(f"imported {len(r.imported)} runs into {a.raw}/runs ({len(r.skipped)} already there, "
          f"{len(r.ignored)} test cases without a dataset or a job: fixtures, builds)")
    for e in r.errors:
        print(f"  not imported (retried next time): {e['run_id']}: {e['file']}: {e['error']}", file=sys.stderr)
    return 1 if r.errors else 0


def cmd_import_neighbourhood(a) -> int:
    from hpcvar.collate.neighbourhood_import import RefusedTables, import_tables
    from hpcvar.data.schema import SchemaError
    from hpcvar.util.anonymise import Pseudonymiser, load_salt

    pseudo = Pseudonymiser(load_salt(a.salt_file) if a.anonymise else None, enabled=a.anonymise)
    try:
        r = import_tables(a.runs, a.neighbourhood, a.out, pseudo, system=a.system)
    except (RefusedTables, SchemaError) as exc:
        print(f"hpcvar import-neighbourhood: {exc}", file=sys.stderr)
        return 2
    print(f"imported {r['runs']} runs of {r['datasets']} datasets with {r['neighbourhood_rows']} neighbourhood rows "
          f"into {a.out}")
    return 0


def cmd_sample(a) -> int:
    from hpcvar.sampler import run

    sources = [s.strip() for s in a.sources.split(",") if s.strip()]
    patterns = [p.strip() for p in a.cxi_counters.split(",") if p.strip()] if a.cxi_counters else None
    try:
        kwargs = {"cxi_counters": patterns} if patterns else {}
        return run(a.out, interval=a.interval, sources=sources, sysfs_root=a.sysfs_root,
                   duration=a.duration, proc_root=a.proc_root, **kwargs)
    except ValueError as exc:
        print(f"hpcvar sample: {exc}", file=sys.stderr)
        return 2


def cmd_schema(a) -> int:
    from hpcvar.data.schema import markdown

    print(markdown())
    return 0


def cmd_campaign(a) -> int:
    from hpcvar.campaign import rounds

    if a.action == "round":
        environment = {}
        for item in a.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SystemExit(f"hpcvar campaign round: --env {item!r}: expected NAME=VALUE")
            environment[key] = value
        alongside = {"test": a.alongside, "options": a.alongside_option} if a.alongside else None
        background = json.loads(a.background) if a.background else None
        return rounds.run_round(a.report, config=a.reframe_config, system=a.system, checks=a.checks,
                                tests=a.tests, options=a.option, prefix=a.prefix, environment=environment,
                                alongside=alongside, background=background, topology=a.topology,
                                round_index=a.round_index, rounds=a.rounds, image=a.image)
    if a.action == "request":
        print(f"round {rounds.request(a.results, a.id)} requested: run the workflow to run it")
        return 0
    if not (Path.cwd() / a.configfile).is_file():
        print(f"hpcvar campaign schedule: {a.configfile}: no such file in {Path.cwd()} (the campaign's "
              "configuration, relative to the project directory)", file=sys.stderr)
        return 2
    line = rounds.schedule_line(Path.cwd(), a.profile, a.every, a.configfile, a.results)
    print(line)
    if a.install:
        try:
            added = rounds.install_schedule(line, a.install)
        except RuntimeError as exc:
            print(f"hpcvar campaign schedule: {exc}", file=sys.stderr)
            return 2
        print(f"{'installed in' if added else 'already in'} your {a.install} ({a.install} -l shows it)")
    return 0


def cmd_containers(a) -> int:
    """build / list / recipe / check: exit 0, 1 (a recipe is stale, an image is not usable) or 2 (bad input)."""
    from hpcvar.containers import definition, runtime, store
    from hpcvar.containers.store import ImageError

    where = store.store_dir(a.store)
    try:
        defs = definition.load(a.definitions)
        if a.action == "build":
            from hpcvar.containers.build import Builder, mirror_from_env

            names = a.names or [n for n, i in defs.images.items() if not i.source or (a.mirror or mirror_from_env())]
            problems = runtime.build_problems()
            if problems:
                print("hpcvar containers build: cannot build here:\n  " + "\n  ".join(problems), file=sys.stderr)
                return 2
            builder = Builder(defs, where, mirror=a.mirror or mirror_from_env(), force=a.force, jobs=a.jobs)
            for name in names:
                defs.image(name)  # every name checked before the first build starts
            for name in names:
                rec = builder.build(name)
                print(f"{name}: {where / rec['squashfs']} sha256:{rec['squashfs_sha256']}")
            return 0
        if a.action == "list":
            for name, image in defs.images.items():
                rec = store.read_record(store.record_path(where, name))
                state = (f"built {rec['built']}, {rec['squashfs_bytes'] / 1e6:.0f} MB, sha256:{rec['squashfs_sha256']}"
                         if rec else "not built" + (" (needs a source mirror)" if image.source else ""))
                print(f"{name:<16} {state}\n{'':<16} tests {', '.join(image.tests)}; {image.description}")
            return 0
        if a.action == "recipe":
            if a.check:
                stale = definition.stale_recipes(defs, a.names)
                for path in stale:
                    print(f"{path}: stale (regenerate: hpcvar containers recipe {path.stem} --write)", file=sys.stderr)
                return 1 if stale else 0
            for name in a.names or list(defs.images):
                text = definition.apptainer_recipe(defs, defs.image(name))
                if a.write:
                    definition.recipe_path(defs, defs.image(name)).write_text(text)
                    print(f"wrote {definition.recipe_path(defs, defs.image(name))}")
                else:
                    print(text, end="")
            return 0
        # check
        resolved = store.resolve(a.image, where)
        problems = runtime.problems(resolved.runtime)
        print(f"{resolved.container} ({resolved.path}; digest checked against {resolved.checked})")
        for p in problems:
            print(f"  cannot run here: {p}", file=sys.stderr)
        return 1 if problems else 0
    except definition.DefinitionError as exc:
        print(f"hpcvar containers: {exc}", file=sys.stderr)
        return 2
    except ImageError as exc:
        print(f"hpcvar containers {a.action}: {exc}", file=sys.stderr)
        return 1


def cmd_dev(a) -> int:
    from hpcvar.dev import slurm

    return slurm.command(a)


def cmd_interference(a) -> int:
    from hpcvar.analyses.interference import draw_figures
    from hpcvar.experiments.placement import PlacementError
    from hpcvar.parsers.errors import ParseError
    from hpcvar.simulate.interference import simulate_experiment

    overrides = {k: yaml_value(v) for k, v in _kv(a.set).items()}
    try:
        result = simulate_experiment(a.experiment, a.out, overrides)
    except (ParseError, PlacementError) as exc:
        print(f"hpcvar interference: {exc}", file=sys.stderr)
        return 2
    draw_figures(a.out)  # as the real experiment's analysis draws them
    victim = result.jobs[result.jobs["role"] == "victim"]
    print(f"{result.summary.experiment}: {len(result.network)} runs in {result.summary.elapsed_s} s -> {a.out}")
    print("victim slowdown (median over repetitions): policy, routing, total, communication, latency")
    for (policy, routing), g in victim.groupby(["policy", "routing"], sort=False):
        print(f"  {policy:<20} {routing:<9} {g['slowdown_total'].median():7.3f} {g['slowdown_comm'].median():7.3f} "
              f"{g['slowdown_latency'].median():7.3f}")
    return 0


def cmd_interference_run(a) -> int:
    from hpcvar.analyses.interference import analyse
    from hpcvar.campaign.interference import ExperimentRunError, run
    from hpcvar.collate import collate
    from hpcvar.experiments.spec import load_experiment
    from hpcvar.parsers.errors import ParseError
    from hpcvar.util.anonymise import Pseudonymiser, load_salt

    overrides = {k: yaml_value(v) for k, v in _kv(getattr(a, "set", [])).items()}
    out = Path(a.out)
    try:
        if a.action == "run":
            exp = load_experiment(a.experiment, overrides)
            run(exp, out)
            out.mkdir(parents=True, exist_ok=True)
            Path(out, "experiment.yaml").write_text(yaml_dump(exp.document))
            pseudo = Pseudonymiser(load_salt(a.salt_file))
            result = collate(out / "raw", out / "dataset", pseudo)
            print(f"collated {len(result.new_runs)} new runs of the experiment into {out / 'dataset'}")
        summary = analyse(out, a.analysis_out)
    except (ParseError, ExperimentRunError) as exc:
        print(f"hpcvar interference: {exc}", file=sys.stderr)
        return 2
    print(f"{summary.experiment}: slowdown (median over repetitions): job, policy, total, communication, latency")
    for job, by_policy in summary.slowdowns.items():
        for policy, figures in by_policy.items():
            f = figures["site"]
            print(f"  {job:<14} {policy:<20} " + " ".join("    n/a" if v is None else f"{v:7.3f}" for v in
                                                          (f.slowdown_total, f.slowdown_comm, f.slowdown_latency)))
    for note in summary.notes:
        print(f"  note: {note}", file=sys.stderr)
    return 0


def yaml_dump(doc) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


#: The documentation page (under docs/) that explains each command; a subcommand without an entry
#: of its own is explained on its command's page. Each command's --help ends with it, and the
#: command-line reference (docs/reference/cli.md, python -m hpcvar.docpages) links it.
DOCS = {
    (): "index.md",
    ("simulate",): "explanation/simulator.md",
    ("collate",): "how-to/bring-your-own-data.md",
    ("inspect",): "how-to/inspect.md",
    ("summary",): "getting-started/main-job.md",
    ("overview",): "explanation/method.md#overview",
    ("neighbourhood",): "explanation/method.md#neighbourhood",
    ("deviation",): "explanation/method.md#deviation",
    ("forecast",): "explanation/method.md#forecast",
    ("distributions",): "explanation/method.md#distributions",
    ("compare",): "tutorials/upgrade-check.md",
    ("explain",): "tutorials/explain-a-run.md",
    ("assemble",): "explanation/method.md#the-analyses-and-their-jobs",
    ("report",): "getting-started/report.md",
    ("import-neighbourhood",): "how-to/bring-your-own-data.md",
    ("import-reframe",): "how-to/bring-your-own-data.md",
    ("sample",): "counters.md",
    ("schema",): "dataset.md",
    ("campaign",): "how-to/suite-on-your-cluster.md",
    ("containers",): "how-to/containers.md",
    ("dev",): "testbed.md",
    ("interference",): "how-to/interference.md",
}


def docs_page(path: tuple[str, ...]) -> str:
    """The page (relative to docs/) explaining the command ``hpcvar *path``: its own, else its
    parent command's."""
    while path not in DOCS:
        path = path[:-1]
    return DOCS[path]


def _add_epilogs(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Each command's --help ends with the page that explains it."""
    from hpcvar.docpages import commands

    parser.epilog = f"Documentation: docs/{DOCS[()]}; every command: docs/reference/cli.md"
    for path, sub, _ in commands(parser):
        sub.epilog = f"Documentation: docs/{docs_page(path)}"
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line. Every command's options, or with ``command`` (the one :func:`main` was
    asked to run; ``""`` for none) only that command's in full: the options built from the
    settings models (the analyses' ``--set`` names, ``compare``'s options) are left out of the
    others, so ``hpcvar --help`` and the commands that are not analyses start without pydantic."""
    return _add_epilogs(_commands(command))


def _commands(command: str | None = None) -> argparse.ArgumentParser:
    def full(name: str) -> bool:
        return command is None or command == name

    p = argparse.ArgumentParser(prog="hpcvar", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("simulate", help="write a simulated campaign's raw files (with truth.json)")
    s.add_argument("--preset", default="demo", help="demo (default) or paper")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True, help="raw campaign directory to (re)create")
    s.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a preset field, e.g. --set days=30 (repeatable)")
    s.add_argument("--workers", type=_processes, default=None, metavar="N",
                   help="processes writing the runs' files (default: one per usable core; the files are the "
                        "same at any count)")
    s.set_defaults(func=cmd_simulate)

    s = sub.add_parser("collate", help="parse a raw campaign directory into the tidy Parquet dataset",
                       description="Parse a raw campaign directory (docs/raw-layout.md) into the tidy Parquet "
                                   "dataset (docs/dataset.md). Runs already in the dataset are skipped, so re-running "
                                   "is safe and a new round is appended without rewriting what was collated "
                                   "(OUT/collated.json records what each collation added). A bad file (truncated, "
                                   "malformed, wrong format) is reported with file and line, its run is set aside "
                                   "in OUT/quarantine.jsonl, and the rest collates.")
    s.add_argument("raw", help="raw campaign directory (system.yaml, runs/, ldms/, perflogs/)")
    s.add_argument("--out", required=True, help="dataset directory (appended to, never rewritten)")
    s.add_argument("--salt-file", default=".hpcvar-salt", help="salt for user pseudonyms (created if absent)")
    s.add_argument("--no-anonymise", dest="anonymise", action="store_false",
                   help="keep real user names (only for private use; off by default)")
    s.add_argument("--summary", help="also write the text summary to this file")
    s.add_argument("--rebuild", action="store_true",
                   help="empty the dataset first and collate everything again (e.g. after re-simulating)")
    s.add_argument("--workers", type=_processes, default=None, metavar="N",
                   help="processes reading the runs' files (default: one per usable core; the dataset is "
                        "the same at any count)")
    s.set_defaults(func=cmd_collate)

    s = sub.add_parser("inspect", help="detect, parse and describe raw files (or show the error)",
                       description="Which format is each file, does hpcvar read it, and what is in it: check in "
                                   "seconds whether hpcvar reads your system's files. A dataset directory is "
                                   "described (runs, time span, rows per table). Exit 1 when any file could not be "
                                   "read; the error names the file and line, and for sacct output the missing "
                                   "field.")
    s.add_argument("files", nargs="+")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("summary", help="runs per dataset and the spread of run times")
    s.add_argument("dataset")
    s.add_argument("--out", help="also write it to this file")
    s.set_defaults(func=cmd_summary)

    from hpcvar.analyses.registry import ANALYSES

    for name, analysis in ANALYSES.items():
        if name == "explain":  # a command of its own: one run, or every run (below)
            continue
        text = analysis.help
        s = sub.add_parser(name, help=text, description=f"{text}. {'Logs to MLflow and w' if analysis.tracked else 'W'}"
                                                        "rites OUT/summary.json.")
        s.add_argument("dataset", help="dataset directory written by `hpcvar collate`")
        s.add_argument("--out", required=True, help="directory for summary.json, tables and figures")
        s.add_argument("--config", help=f"YAML file with the settings: the workflow's config/config.yaml (its "
                                        f"'analyses: {name}:' section), a file with a '{name}:' section, or the "
                                        f"settings alone; unknown settings are refused")
        s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one setting, e.g. --set folds=5 (value is YAML; repeatable)"
                            + _settings_names(analysis, full(name)))
        if analysis.per_dataset:
            s.add_argument("--only", metavar="NAME",
                           help="analyse this dataset alone and write OUT/parts/NAME.json (the workflow's fan-out: "
                                "one job per dataset; `hpcvar assemble` merges the parts into OUT/summary.json)")
        if analysis.takes_truth:
            s.add_argument("--truth", metavar="TRUTH_JSON",
                           help="the simulator's truth.json: its oracle's error (truth_oracle.parquet beside it) is "
                                "reported beside the models'")
        s.set_defaults(func=cmd_analysis)

    from hpcvar.defaults import REFRAME_CONFIG

    s = sub.add_parser("compare", help="did an upgrade change performance? compare distributions BEFORE and AFTER",
                       description="Per (test, variable): KS, Anderson-Darling, Brown-Forsythe (Holm-corrected over "
                                   "all pairs), median shift with bootstrap CI, spread and modes -> unchanged, faster, "
                                   "slower or changed shape. Exit 0: no regression, 1: regression (--fail-on), "
                                   "2: bad input.")
    s.add_argument("before_source", metavar="BEFORE",
                   help="samples file (CSV/Parquet: test,variable,value[,unit,better,group]), dataset directory, "
                        "or reframe:UUID[,UUID...] (stored ReFrame sessions)")
    s.add_argument("after_source", metavar="AFTER", nargs="?",
                   help="the same kinds; omit it to compare two date ranges of one dataset directory")
    s.add_argument("--before", metavar="SELECTION",
                   help="dataset runs started in START..END (dates or ISO times, UTC, inclusive), e.g. "
                        "2026-01-01..2026-01-15, or in campaign rounds round:001..010; or run in a container image "
                        "image:NAME[@sha256:HEX], or bare-metal; a range and an image joined by a comma")
    s.add_argument("--after", metavar="SELECTION", help="the same kinds, e.g. 2026-01-16..2026-02-01 or image:amgproxy")
    s.add_argument("--reference", metavar="SOURCE|RANGE",
                   help="an earlier baseline drawn beside BEFORE and AFTER in the figures (the paper's ORIG)")
    s.add_argument("--out", help="directory for compare.csv, summary.json and figures/ (default: print only)")
    s.add_argument("--fail-on",
                   help="verdicts that make the exit code 1: slower, faster, changed-shape, not-compared, or none "
                        "(default slower,changed-shape)")
    s.add_argument("--higher-is-better", action="append", default=[], metavar="VAR",
                   help="variable (shell pattern) where higher is better (repeatable; default lower, or higher "
                        "for rate units such as GB/s)")
    s.add_argument("--lower-is-better", action="append", default=[], metavar="VAR",
                   help="variable (shell pattern) where lower is better (repeatable)")
    s.add_argument("--reframe-config", default=REFRAME_CONFIG,
                   help="ReFrame configuration whose results database holds the sessions (honours HPCVAR_RFM_DB; "
                        f"default {REFRAME_CONFIG}, relative to the current directory)")
    s.add_argument("--no-figures", action="store_true", help="skip the per-pair SVG figures")
    if full("compare"):
        from hpcvar.settings import CompareSettings, add_options

        add_options(s, CompareSettings)  # --alpha, --min-effect, ...: docs/settings.md
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting by its name in the workflow's compare: section (value is YAML; repeatable; the "
                        "options above win), e.g. --set n_perm=999")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser("explain", help=ANALYSES["explain"].help,
                       description="How much slower the run was than its dataset's typical (median) run, where in "
                                   "time, and the causes -- neighbours, network congestion, placement, I/O, CPU and "
                                   "memory load -- ranked by the seconds each accounts for, from the deviation and "
                                   "neighbourhood analyses' outputs (run them first). Exit 2: unknown run or no "
                                   "analyses.")
    s.add_argument("dataset", help="dataset directory written by `hpcvar collate`")
    s.add_argument("run_id", nargs="?", metavar="RUN_ID",
                   help="the run (runs.run_id, e.g. cray-12345); omit it with --out to explain every run")
    s.add_argument("--analyses", metavar="DIR",
                   help="the analyses' output directory (default: DATASET/../analyses, the workflow's layout)")
    s.add_argument("--json", action="store_true", help="print the explanation as JSON")
    s.add_argument("--out", metavar="DIR", help="without RUN_ID: write summary.json (every dataset's findings and "
                                                "slowest runs) and <dataset>/runs.csv (every run's verdict) here")
    s.add_argument("--config", help="YAML file with the settings (the workflow's config: its 'analyses: explain:')")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting (value is YAML; repeatable)" + _settings_names(ANALYSES["explain"],
                                                                                            full("explain")))
    s.add_argument("--only", metavar="NAME",
                   help="analyse this dataset alone and write OUT/parts/NAME.json (the workflow's fan-out: one "
                        "job per dataset; `hpcvar assemble` merges the parts into OUT/summary.json)")
    s.set_defaults(func=cmd_explain)

    s = sub.add_parser("assemble", help="merge one analysis's per-dataset parts into its summary.json",
                       description="The workflow runs each (analysis, dataset) as its own job (`--only NAME`, "
                                   "OUT/parts/NAME.json); this writes OUT/summary.json from the parts, as one run over "
                                   "every dataset would.")
    s.add_argument("analysis", choices=list(ANALYSES))
    s.add_argument("parts", nargs="+", metavar="PART", help="OUT/parts/<dataset>.json files")
    s.add_argument("--out", required=True, help="the analysis's output directory")
    s.set_defaults(func=cmd_assemble)

    s = sub.add_parser("report", help="write the self-contained HTML report for facility staff",
                       description="One HTML file (figures inline, works offline) from the dataset and the "
                                   "analyses' summary.json files; sections without data say so.")
    s.add_argument("dataset", help="dataset directory written by `hpcvar collate`")
    s.add_argument("--analyses", help="directory holding neighbourhood/, deviation/, forecast/ summaries")
    s.add_argument("--out", required=True, help="the HTML file to write")
    s.add_argument("--figures", help="also keep each figure as SVG here (default: beside OUT)")
    s.add_argument("--config", help="configuration file to show in the provenance footer")
    s.add_argument("--salt-file", default=".hpcvar-salt", help="salt for user pseudonyms (created if absent)")
    s.add_argument("--no-anonymise", dest="anonymise", action="store_false",
                   help="show user names as collated (only for private use; off by default)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("import-neighbourhood", help="per-run times and concurrent users (two CSV tables) into a "
                                                    "dataset for the neighbourhood analysis",
                       description="RUNS: run_id,dataset,total_time_s,start,end[,num_nodes,job_id,user]; "
                                   "NEIGHBOURHOOD: run_id,user,num_nodes[,job_id], one row per concurrent user and "
                                   "run. Bad rows are refused with file and line and nothing is written; user names "
                                   "are pseudonymised as collation does.")
    s.add_argument("runs", help="runs table (CSV)")
    s.add_argument("neighbourhood", help="neighbourhood table (CSV)")
    s.add_argument("--out", required=True, help="dataset directory (created, or appended to)")
    s.add_argument("--system", default="imported", help="system name recorded with the runs (default: imported)")
    s.add_argument("--salt-file", default=".hpcvar-salt", help="salt for user pseudonyms (created if absent)")
    s.add_argument("--no-anonymise", dest="anonymise", action="store_false",
                   help="keep user names as they are (only for private use; off by default)")
    s.set_defaults(func=cmd_import_neighbourhood)

    s = sub.add_parser("import-reframe", help="turn ReFrame run reports into raw campaign run directories",
                       description="Each campaign test case of the JSON run reports (ReFrame's --report-file, "
                                   "results/reframe/reports/) becomes runs/<run_id>/ under RAW with its files, "
                                   "sacct of its job's window and, with --ldms, its window of the LDMS store (kept "
                                   "in the run directory, so pruning the store later loses nothing), and a manifest "
                                   "written last; runs already imported are left alone.")
    s.add_argument("reports", nargs="+", help="ReFrame JSON run reports")
    s.add_argument("--raw", required=True, help="raw campaign directory to add runs to")
    s.add_argument("--topology", help="the site's node -> router -> group map (CSV, YAML or Slurm topology.conf); "
                                      "default: nodes recorded flat, without network structure")
    s.add_argument("--ldms", metavar="STORE_DIR",
                   help="LDMS store_csv directory (e.g. /var/ldms/csv/aries_rtr_mmr): each run keeps the rows of "
                        "its window in runs/<run_id>/ldms/; without it runs have no system-wide counters")
    s.add_argument("--ldms-margin", type=float, default=60.0, metavar="S",
                   help="seconds of LDMS samples kept before and after each job (default 60: at least one "
                        "sampling interval, so the run's first interval has a sample before it)")
    s.add_argument("--summary", help="also write what was imported as JSON to this file")
    s.set_defaults(func=cmd_import_reframe)

    s = sub.add_parser("sample", help="sample this node's network counters until SIGTERM/SIGINT (beside a job step)",
                       description="Per-node counter sampler: srun --overlap --ntasks-per-node=1 hpcvar sample "
                                   "--out 'counters.{hostname}.csv' & (docs/counters.md).")
    s.add_argument("--out", required=True, help="CSV file to write; {hostname} is replaced by the node's name")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1.0)")
    s.add_argument("--sources", default="net,infiniband,cxi,psi",
                   help="comma-separated: net, infiniband, cxi, psi (absent ones are recorded, not errors)")
    s.add_argument("--duration", type=float, help="stop after this many seconds (default: run until signalled)")
    s.add_argument("--sysfs-root", default="/sys", help="root of the sysfs tree to read (default /sys)")
    s.add_argument("--proc-root", default="/proc", help="root of the proc tree (pressure/) to read (default /proc)")
    s.add_argument("--cxi-counters", help="comma-separated shell patterns of Cassini telemetry names "
                                          "(default: the CXI summary groups; '*' for all)")
    s.set_defaults(func=cmd_sample)

    s = sub.add_parser("schema", help="print the dataset schema as Markdown")
    s.add_argument("--markdown", action="store_true", help="(the only format; accepted for clarity)")
    s.set_defaults(func=cmd_schema)

    s = sub.add_parser("campaign", help="campaign rounds: run one, request one, or print a schedule line")
    camp = s.add_subparsers(dest="action", required=True)
    s = camp.add_parser("round", help="run every dataset's ReFrame test once, in random order (the workflow's rule)")
    s.add_argument("--report", required=True, help="ReFrame JSON run report to write (rounds/<id>/reframe-report.json)")
    s.add_argument("--reframe-config", default=REFRAME_CONFIG,
                   help=f"ReFrame configuration (default {REFRAME_CONFIG}, relative to the current directory)")
    s.add_argument("--system", required=True, help="ReFrame system (local, local-slurm, generic-slurm, ...)")
    s.add_argument("--checks", action="append", default=[], help="check path (repeatable)")
    s.add_argument("--tests", action="append", default=[], help="test name pattern, -n (repeatable)")
    s.add_argument("--option", action="append", default=[], help="extra ReFrame argument (repeatable)")
    s.add_argument("--prefix", default="results/reframe", help="ReFrame output prefix (rounds/<id> below it)")
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable for ReFrame, e.g. HPCVAR_RFM_SIZE=toy (repeatable)")
    s.add_argument("--alongside", metavar="TEST",
                   help="ReFrame test started as a job of its own before the round and cancelled after it "
                        "(e.g. Aggressor): a known neighbour of every run")
    s.add_argument("--alongside-option", action="append", default=[], metavar="ARG",
                   help="extra ReFrame argument of the job alongside (repeatable)")
    s.add_argument("--background", metavar="JSON",
                   help="other users' jobs with planted causes around the round (campaign.background, as JSON)")
    s.add_argument("--topology", help="topology map the background jobs are placed on")
    s.add_argument("--image", help="run the tests in container images (ReFrame's -S image=IMAGE: auto, a store "
                                   "image's name, or a path); checked before anything is submitted")
    s.add_argument("--round-index", type=int, help="the round's number (1-based): the background's random draw")
    s.add_argument("--rounds", type=int, help="the campaign's fixed rounds (campaign.rounds): the background's "
                                              "balanced design spans them")
    s.set_defaults(func=cmd_campaign)
    s = camp.add_parser("request", help="ask for one more round; the next workflow invocation runs it")
    s.add_argument("--results", default="results",
                   help="the campaign's results directory, its configuration's `results:` (default results)")
    s.add_argument("--id", help="round id (default: the current UTC time)")
    s.set_defaults(func=cmd_campaign)
    s = camp.add_parser("schedule", help="print (or install) an scrontab/crontab line that runs a round every day "
                                         "or week")
    s.add_argument("--every", choices=["day", "week"], default="day")
    s.add_argument("--profile", default="slurm")
    s.add_argument("--configfile", required=True,
                   help="the campaign's workflow configuration (source: campaign), relative to the project directory")
    s.add_argument("--results", help="its results directory (default: the file's `results:`)")
    s.add_argument("--install", choices=["scrontab", "crontab"],
                   help="also add the line to your scrontab (Slurm) or crontab, keeping the other entries")
    s.set_defaults(func=cmd_campaign)

    s = sub.add_parser("containers", help="the suite's container images: build them here (Charliecloud), list, "
                                          "Apptainer recipes, check one",
                       description="One definition per image (containers/images.yaml): built here from the package "
                                   "registry with mmdebstrap and Charliecloud into an image store (an image directory, "
                                   "a single-file SquashFS image and a record with both sha256 digests); the Apptainer "
                                   "recipes containers/NAME.def are generated from the same definitions.")
    cont = s.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", help="image store (default $HPCVAR_IMAGES or results/images)")
    common.add_argument("--definitions", default="containers/images.yaml",
                        help="image definitions (default containers/images.yaml, relative to the current directory)")
    s = cont.add_parser("build", parents=[common], help="build images (only what changed since the last build)",
                        description="Builds NAMEs (default: every image that needs no upstream sources, and with a "
                                    "source mirror every Table I image too) into the store. A stage is rebuilt only "
                                    "when an input changed: the definition, the build scripts, the pins, or the "
                                    "versions the package registry offers. As root (mmdebstrap, ch-run).")
    s.add_argument("names", nargs="*", metavar="NAME")
    s.add_argument("--mirror", help="source mirror for the Table I images (default $HPCVAR_SOURCE_MIRROR); bound "
                                    "in read-only at build time")
    s.add_argument("--force", action="store_true", help="rebuild even when nothing changed")
    s.add_argument("--jobs", type=int, help="parallel make jobs of the builds (default: the cores)")
    s.set_defaults(func=cmd_containers)
    s = cont.add_parser("list", parents=[common], help="the defined images, what is built, their digests")
    s.set_defaults(func=cmd_containers, names=[])
    s = cont.add_parser("recipe", parents=[common], help="the Apptainer recipe of images (generated from the "
                                                         "definitions): print, --write or --check containers/NAME.def")
    s.add_argument("names", nargs="*", metavar="NAME")
    how = s.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true", help="write containers/NAME.def")
    how.add_argument("--check", action="store_true", help="exit 1 when a containers/NAME.def differs from its definition")
    s.set_defaults(func=cmd_containers)
    s = cont.add_parser("check", parents=[common], help="resolve an image as the suite does (-S image=...), check "
                                                        "its digest and whether it can run here")
    s.add_argument("image", help="a name in the store, an image directory, a .sqfs or .sif, optionally "
                                 "PATH@sha256:HEX")
    s.set_defaults(func=cmd_containers)

    s = sub.add_parser("dev", help="developer tools (a local single-node Slurm cluster)")
    dev = s.add_subparsers(dest="dev_cmd", required=True)
    s = dev.add_parser("slurm", help="start, stop or show a Slurm cluster with accounting on this host (as root)",
                       description="A real Slurm cluster on this host from Debian's packages: munged, MariaDB, "
                                   "slurmdbd, slurmctld, slurmd; one node, or with --nodes N --groups G N nodes in "
                                   "network namespaces wired as a dragonfly with shaped links. State in "
                                   "$HPCVAR_SLURM_DIR (default /var/tmp/hpcvar-slurm). Single node: "
                                   "docs/slurm-dev-cluster.md.")
    s.add_argument("action", choices=["up", "down", "status", "routing"])
    s.add_argument("--dir", help="state directory (default $HPCVAR_SLURM_DIR or /var/tmp/hpcvar-slurm)")
    s.add_argument("--nodes", type=int, help="up: that many nodes in network namespaces, wired as a dragonfly "
                                             "(docs/testbed.md); default: one node, this host")
    s.add_argument("--groups", type=int, help="up: dragonfly groups of the nodes (default 2 with --nodes)")
    s.add_argument("--global-rate", default="50mbit", help="up: rate of every global link (tc rate; default 50mbit)")
    s.add_argument("--node-rate", default="200mbit", help="up: rate of every node link (default 200mbit)")
    s.add_argument("--global-delay-ms", type=float, default=0.0, help="up: delay of the global links (netem)")
    s.add_argument("--node-delay-ms", type=float, default=0.0, help="up: delay of the node links (netem)")
    s.add_argument("--routing", choices=["minimal", "valiant"], default="minimal",
                   help="up, routing: across groups the direct global link, or (3 groups or more) an "
                        "intermediate group per flow")
    s.add_argument("--extra-user", action="append",
                   help="unprivileged Unix user to create and register for other users' jobs (up; repeatable; "
                        "default hpcvar-aggressor)")
    s.add_argument("--link-etc", action="store_true",
                   help="also symlink /etc/slurm/slurm.conf to the generated one (up; removed by down)")
    s.add_argument("--timeout", type=float, default=60, help="seconds to wait for each daemon (up; default 60)")
    s.add_argument("--purge", action="store_true", help="also remove the state directory (down)")
    s.set_defaults(func=cmd_dev)

    s = sub.add_parser("interference", help="victim/aggressor interference experiments (simulated what-if)")
    inter = s.add_subparsers(dest="action", required=True)
    s = inter.add_parser("simulate", help="run an experiment on the flow-level dragonfly model",
                         description="Every placement policy x routing x repetition of EXPERIMENT.yaml: each job "
                                     "alone and all together on the simulated network. Writes jobs, samples and "
                                     "network tables (CSV and Parquet), summary.json and the resolved experiment "
                                     "under OUT. Exit 2 on a bad experiment file or an impossible placement.")
    s.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment description "
                                                                  "(example: config/experiments/interference.yaml)")
    s.add_argument("--out", required=True, help="directory for the tables and summary.json")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, dotted, value as YAML: --set system.groups=9, --set aggressors.0.nodes=64, "
                        "--set 'routing=[adaptive]' (repeatable)")
    s.set_defaults(func=cmd_interference)
    s = inter.add_parser("run", help="run an experiment for real on a Slurm cluster (ReFrame submits the jobs)",
                         description="Every placement policy x repetition of EXPERIMENT.yaml on the cluster its "
                                     "slurm: section names: node lists chosen by the policy among sinfo's free nodes, "
                                     "the victim alone, each aggressor alone, then all together; every job a ReFrame "
                                     "run imported into OUT/raw and collated into OUT/dataset, then analysed "
                                     "(jobs.csv, samples, summary.json). Re-running continues an interrupted "
                                     "experiment. Exit 2 when a step cannot be carried out.")
    s.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment description with a slurm: section")
    s.add_argument("--out", required=True, help="experiment directory (reports, raw, dataset, tables)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, dotted, value as YAML: --set repetitions=1, --set slurm.share_nodes=true")
    s.add_argument("--salt-file", default=".hpcvar-salt", help="salt for user pseudonyms (created if absent)")
    s.add_argument("--analysis-out", help="write the tables and summary.json here instead of OUT")
    s.set_defaults(func=cmd_interference_run)
    s = inter.add_parser("analyse", help="slowdowns of a real experiment's runs (after `interference run`)")
    s.add_argument("out", metavar="OUT", help="the experiment directory of `hpcvar interference run`")
    s.add_argument("--analysis-out", help="write the tables and summary.json here instead of OUT")
    s.set_defaults(func=cmd_interference_run, action="analyse")
    return p


def _settings_names(analysis, listed: bool) -> str:
    """The end of an analysis's ``--set`` help: its settings' names (from its model) when
    ``listed``."""
    if not listed:
        return ""
    return f"; settings: {', '.join(analysis.settings.model_fields)} (defaults and meaning: docs/settings.md)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    args = build_parser(command).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
