"""The documentation's generated pages, made from the code they describe, and the check that
they are current:

* docs/reference/cli.md, the command line, from the parser itself (:func:`hpcvar.cli.build_parser`):
  every command and subcommand with its description, usage, arguments, defaults and choices, and
  the page that explains it (the same page each command's ``--help`` ends with);
* docs/dataset.md, the dataset's tables and columns (:mod:`hpcvar.data.schema`, ``hpcvar schema``);
* docs/settings.md and the workflow's settings schema (:mod:`hpcvar.settings`).

``python -m hpcvar.docpages --write`` regenerates them all; without ``--write`` it exits 1 naming
the stale ones. The site's build runs the same check (docs/hooks.py: a stale page is a warning,
so ``mkdocs build --strict`` fails), and ``tests/test_docs.py`` builds the site.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: The generated page, relative to the repository.
PAGE = "docs/reference/cli.md"
#: Usage lines are wrapped at this width whatever the terminal (the page must not depend on it).
WIDTH = 100


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser, one-line help) of every command below ``parser``, depth first in the
    parser's order; ``path`` is the words after ``hpcvar``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from commands(sub, (*path, name))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _argument(action: argparse.Action) -> tuple[str, str] | None:
    """(name, what) of one argument for the table, or None for --help and subcommand choosers."""
    if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
        return None
    if action.option_strings:
        name = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
    else:
        name = f"`{action.metavar or action.dest}`" + (" ..." if action.nargs in ("+", "*") else "")
    what = [action.help or ""]
    if action.choices and not isinstance(action.choices, dict):
        what.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.required and action.option_strings:
        what.append("required")
    if action.nargs in ("?", "*") and not action.option_strings:
        what.append("optional")
    default = action.default
    if (action.option_strings and action.nargs != 0 and default not in (None, [], argparse.SUPPRESS)
            and "default" not in (action.help or "")):
        what.append(f"default `{default}`")
    return name, "; ".join(w for w in what if w)


def render(parser: argparse.ArgumentParser, docs_of) -> str:
    """The Markdown page: ``docs_of(path)`` is the page (relative to docs/) explaining a command."""
    lines = ["# Command line", "",
             "Generated from the `hpcvar` command's own parser (`src/hpcvar/cli.py`) by "
             "`python -m hpcvar.docpages --write`; do not edit. The same text is each command's "
             "`--help`, which ends with the page below it.", "",
             "Every rule of the workflow calls this command; use it directly as "
             "`.venv/bin/hpcvar COMMAND ...`.", "",
             "```text", _usage(parser), "```", "",
             (parser.description or "").strip(), ""]
    lines += ["| command | what it does |", "|---|---|"]
    for path, _, helptext in commands(parser):
        anchor = "hpcvar-" + "-".join(path)
        lines.append(f"| [`hpcvar {' '.join(path)}`](#{anchor}) | {_cell(helptext or '')} |")
    lines.append("")
    for path, sub, helptext in commands(parser):
        anchor = "hpcvar-" + "-".join(path)
        lines += [f"## hpcvar {' '.join(path)} {{ #{anchor} }}", ""]
        text = (sub.description or helptext or "").strip()
        if text:
            lines += [text, ""]
        lines += ["```text", _usage(sub), "```", ""]
        rows = [r for r in map(_argument, sub._actions) if r]
        if rows:
            lines += ["| argument | meaning |", "|---|---|"]
            lines += [f"| {name} | {_cell(what)} |" for name, what in rows]
            lines.append("")
        page = docs_of(path)
        lines += [f"Explained in: [{page}](../{page})", ""]
    return "\n".join(lines).rstrip() + "\n"


def generated(root: Path | str = ".") -> dict[str, str]:
    """Every generated file (relative to the repository ``root``) -> the text it should hold."""
    from hpcvar.analyses.registry import settings_sections
    from hpcvar.cli import build_parser, docs_page
    from hpcvar.data.schema import markdown
    from hpcvar.settings import GENERATED

    cli = render(build_parser(), docs_page)
    return {PAGE: cli, "docs/dataset.md": markdown() + "\n",
            **{rel: make(settings_sections()) for rel, make in GENERATED.items()}}


def stale(root: Path | str = ".") -> list[str]:
    """The generated files under ``root`` that differ from what the code makes now."""
    root = Path(root)
    return [rel for rel, text in generated(root).items()
            if not (root / rel).is_file() or (root / rel).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hpcvar.docpages", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the stale generated files in --root")
    ap.add_argument("--root", default=".", help="the repository (default: the current directory)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    out_of_date = stale(root)
    if args.write:
        texts = generated(root)
        for rel in out_of_date:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(texts[rel])
        print(f"rewrote {', '.join(out_of_date)}" if out_of_date else "generated files were up to date")
        return 0
    for rel in out_of_date:
        print(f"{rel}: out of date; run python -m hpcvar.docpages --write", file=sys.stderr)
    return 1 if out_of_date else 0


if __name__ == "__main__":
    # The imported module's main, not this __main__ copy's (the settings schema recognises nested
    # settings by their class, as in hpcvar.settings).
    from hpcvar.docpages import main as imported_main

    sys.exit(imported_main())
