"""Each analysis setting is defined once (src/hpcvar/settings.py); the workflow's schema, the
documentation, config/config.yaml and the command line agree with that one definition."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from hpcvar import settings
from hpcvar.defaults import FORECAST_GRID
from hpcvar.analyses.registry import settings_sections
from hpcvar.settings import (CompareSettings, DeviationSettings, ForecastSettings, NeighbourhoodSettings, SettingsError,
                             section_key)

#: Every section of settings by name (the registry's), and the analyses' (less the regression check's).
SETTINGS = settings_sections()
ANALYSES = {name: model for name, model in SETTINGS.items() if name != "compare"}

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
CONFIG = REPO / "config" / "config.yaml"


def test_generated_schema_and_docs_are_those_of_the_models(tmp_path):
    for rel, make in settings.GENERATED.items():
        assert (REPO / rel).read_text() == make(SETTINGS), f"{rel} is stale: run python -m hpcvar.settings --write"
    # and the check itself fails on a stale file, naming it
    (tmp_path / "docs").mkdir()
    (tmp_path / "workflow" / "schemas").mkdir(parents=True)
    (tmp_path / "docs" / "settings.md").write_text("old\n")
    out = subprocess.run([sys.executable, "-m", "hpcvar.settings", "--root", str(tmp_path)], capture_output=True,
                         text=True)
    assert out.returncode == 1 and "docs/settings.md: out of date" in out.stderr


def _validated(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    validate(doc, str(SCHEMA))
    return doc


def test_workflow_defaults_are_the_models_defaults():
    """Snakemake's validate() fills in the defaults from the generated schema: they are exactly
    the models' defaults, for every key of every analysis (nothing missing, nothing extra)."""
    cfg = _validated({})
    for name, model in ANALYSES.items():
        assert cfg["analyses"][name] == model().as_dict(), name
    compare = {k: v for k, v in cfg["compare"].items() if k not in ("before", "after")}
    assert compare == CompareSettings().as_dict()


@pytest.mark.parametrize("section, bad", [
    ("neighbourhood", {"tau": 0}), ("deviation", {"folds": 1}), ("deviation", {"fold": 3}),
    ("forecast", {"lgbm": {"subsample": 1.5}}), ("forecast", {"grid": {"milc": {"m": [3]}}}),
    ("distributions", {"mode_scale": "cubic"}), ("compare", {"alpha": 1.0}), ("compare", {"bogus": 1})])
def test_schema_and_models_refuse_the_same_values(section, bad):
    doc = {"compare": bad} if section == "compare" else {"analyses": {section: bad}}
    with pytest.raises(Exception, match="(?i)validat"):
        _validated(doc)
    with pytest.raises(SettingsError) as exc:
        SETTINGS[section].from_mapping(bad, "my.yaml")
    key = next(iter(bad))
    assert key in str(exc.value) and "my.yaml" in str(exc.value)


def test_config_yaml_restates_no_default():
    """config/config.yaml sets only what differs from the defaults, so each default exists once."""
    doc = yaml.safe_load(CONFIG.read_text())
    sections = {**{n: (doc.get("analyses") or {}).get(n) or {} for n in ANALYSES},
                "compare": {k: v for k, v in (doc.get("compare") or {}).items() if k not in ("before", "after")}}
    for name, given in sections.items():
        defaults = SETTINGS[name]().as_dict()
        restated = {k: v for k, v in given.items() if defaults.get(k) == v}
        assert not restated, f"config/config.yaml restates the defaults of {name}: {restated}"
        SETTINGS[name].from_mapping(given, CONFIG)  # and what it sets is valid


def test_errors_name_every_problem_and_the_known_keys():
    with pytest.raises(SettingsError) as exc:
        ForecastSettings.from_mapping({"analyses": {}, "lr": -1, "lgbm": {"subsample": 2}}, "config/config.yaml")
    text = str(exc.value)
    assert "forecast settings in config/config.yaml" in text
    assert "unknown setting 'analyses'" in text
    assert "lr: Input should be greater than 0 (got -1)" in text
    assert "lgbm.subsample: Input should be less than or equal to 1 (got 2)" in text
    assert "Known settings: grid, folds," in text


def test_defaults_and_overrides():
    assert NeighbourhoodSettings().threshold_nodes == 128
    assert ForecastSettings().neighbour_min_nodes == NeighbourhoodSettings().threshold_nodes
    s = ForecastSettings.from_mapping({"lgbm": {"n_estimators": 5}, "grid": {"milc": {"m": [4], "k": [8]}}})
    assert s.lgbm.n_estimators == 5 and s.lgbm.num_leaves == 15  # nested keys left out keep their default
    # The grid merges per app: the apps left out keep their default grid.
    assert s.as_dict()["grid"] == {**FORECAST_GRID, "milc": {"m": [4], "k": [8]}}
    assert DeviationSettings.from_mapping({"learning_rate": 1}).learning_rate == 1.0


def test_every_setting_is_documented_with_its_default():
    doc = (REPO / "docs" / "settings.md").read_text()
    for name, model in SETTINGS.items():
        section = doc.split(f"## `{section_key(name)}`", 1)[1].split("\n## ", 1)[0]
        for key, info in model.model_fields.items():
            assert info.description, f"{name}.{key} has no description"
            row = next((line for line in section.splitlines() if line.startswith(f"| `{key}` |")), None)
            assert row, f"{name}.{key} missing from its section of docs/settings.md"
            default = info.get_default(call_default_factory=True) if not info.is_required() else None
            if isinstance(default, (bool, int, float, str)):
                shown = str(default).lower() if isinstance(default, bool) else str(default)
                assert f"| `{shown}` |" in row, (name, key, row)


def test_analyses_have_no_defaults_of_their_own():
    import importlib

    for name in (*ANALYSES, "compare"):
        module = importlib.import_module(f"hpcvar.analyses.{name}")
        assert not hasattr(module, "DEFAULTS"), f"hpcvar.analyses.{name}.DEFAULTS duplicates hpcvar.settings"


def test_cli_refuses_a_value_out_of_bounds_before_reading_the_dataset(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hpcvar", "deviation", str(tmp_path / "none"), "--out",
                          str(tmp_path / "o"), "--set", "folds=1"], capture_output=True, text=True)
    assert out.returncode != 0
    assert "deviation settings in the --set options: folds: Input should be greater than or equal to 2" in out.stderr


def test_workflow_settings_reach_compare_as_they_reach_every_analysis():
    """The workflow passes every step's config section as `--set key=<JSON>` (common.smk's
    set_options); hpcvar compare reads them back as the same settings, booleans included,
    and its own options win over them."""
    import json
    import shlex

    from hpcvar.cli import build_parser, compare_settings

    given = {"alpha": 0.01, "independent": True, "n_perm": 99, "max_samples": 5000}
    sets = [f"--set={k}={json.dumps(v)}" for k, v in given.items()]
    a = build_parser().parse_args(["compare", "before.csv", "after.csv", *sets])
    assert compare_settings(a) == CompareSettings.from_mapping(given)
    a = build_parser().parse_args(["compare", "before.csv", "after.csv", *sets, "--alpha", "0.2"])
    assert compare_settings(a).alpha == 0.2 and compare_settings(a).n_perm == 99
    # The workflow's helper writes exactly those options (shell-quoted).
    smk = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert 'shlex.quote(f"--set={k}={json.dumps(v)}")' in smk and smk.count("set_options(") >= 4
    assert shlex.split(" ".join(shlex.quote(x) for x in sets)) == sets


def test_analysis_help_lists_the_models_settings():
    from hpcvar.cli import build_parser

    for name, model in ANALYSES.items():
        sub = build_parser()._subparsers._group_actions[0].choices[name]
        text = " ".join(sub.format_help().split())
        assert f"settings: {', '.join(model.model_fields)} (defaults and meaning: docs/settings.md)" in text


def test_the_registry_and_the_config_sections_name_the_same_analyses_in_the_same_order():
    """src/hpcvar/analyses/registry.py lists the analyses, and the settings sections are derived
    from it (the regression check's last); each analysis has its `analyses:` section in the
    generated schema, its module with a `run` (what `hpcvar <analysis>` and the workflow's rule
    call) and a command."""
    from hpcvar.analyses.registry import ANALYSES as REGISTRY
    from hpcvar.cli import build_parser

    assert list(SETTINGS) == [*REGISTRY, "compare"]
    assert all(SETTINGS[name] is a.settings and a.settings.name == name for name, a in REGISTRY.items())
    assert list(_validated({})["analyses"]) == list(REGISTRY)
    help_text = " ".join(build_parser().format_help().split())
    for name, analysis in REGISTRY.items():
        assert callable(analysis.module.run), name
        assert f"{name} {analysis.help}" in help_text, name


def _over_the_defaults(name: str) -> dict:
    """config/NAME as Snakemake takes it: ``--configfile`` over config/config.yaml."""
    from snakemake.utils import update_config

    merged = yaml.safe_load(CONFIG.read_text())
    update_config(merged, yaml.safe_load((REPO / "config" / name).read_text()))
    return merged


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "config").glob("campaign-*.yaml")))
def test_every_shipped_campaign_configuration_is_valid_over_the_defaults(name):
    """Each campaign configuration in config/ passes the workflow's schema as Snakemake merges it."""
    cfg = _validated(_over_the_defaults(name))
    assert cfg["source"] == "campaign" and cfg["campaign"]["system"] and cfg["results"] != "results"


def test_a_misspelt_campaign_key_is_refused_by_name():
    broken = _over_the_defaults("campaign-testbed-apps.yaml")
    broken["campaign"]["test"] = broken["campaign"].pop("tests")
    with pytest.raises(Exception, match=r"Additional properties are not allowed \('test' was unexpected\)"):
        _validated(broken)
