"""MkDocs hook (mkdocs.yml, ``hooks:``): a generated page that no longer matches the code it is
generated from is a warning, so ``mkdocs build --strict`` fails on it (the pages and their
generators: :mod:`hpcvar.docpages`)."""

import logging
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.hpcvar")


def on_pre_build(config, **kwargs):
    from hpcvar.docpages import stale

    for rel in stale(Path(config.config_file_path).parent):
        log.warning(f"{rel} is out of date with the code: run python -m hpcvar.docpages --write")
