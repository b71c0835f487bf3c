#!/usr/bin/python3
"""The flag reference against the binary: every flag a command's --help
lists is in its reference page (docs/cli.md; for bench, docs/bench.md or
the workload flags it shares in docs/cli.md), and every flag a row of
docs/cli.md's flag tables names is a flag of some command, so neither a new
flag nor a renamed one leaves the reference behind.

Run one case:   docs_flags_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: docs_flags_test.py --list
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, run_case_from_argv  # noqa: E402

COMMANDS = ["simulate", "run", "calibrate", "validate", "serve", "bench", "fit", "sweep", "capacity", "models",
            "hardware"]
# A --help line that starts an option: "  --name arg   text" or "  -q [ --quiet ]".
HELP_FLAG = re.compile(r"^\s+(?:-\w \[ )?(--[a-z][a-z0-9-]*[a-z0-9])\b", re.M)
DOC_FLAG = re.compile(r"--[a-z][a-z0-9-]*[a-z0-9]")


def help_flags(ctx, command):
    p = ctx.ok(command, "--help")
    flags = set(HELP_FLAG.findall(p.stdout)) - {"--help"}
    check(flags, f"{command} --help lists no flags:\n{p.stdout[:500]}")
    return flags


def read(ctx, page):
    with open(os.path.join(ctx.source_dir, "docs", page)) as f:
        return f.read()


def table_row_flags(text):
    """The flags a table row names in its cells before the last (the last one explains)."""
    flags = set()
    for line in text.splitlines():
        if line.startswith("|"):
            for cell in line.strip().strip("|").split("|")[:-1]:
                flags |= set(re.findall(r"`(?:-\w, )?(--[a-z][a-z0-9-]*[a-z0-9])", cell))
    return flags


CASES, case = case_registry()


@case
def docs_every_help_flag_is_documented(ctx):
    cli = set(DOC_FLAG.findall(read(ctx, "cli.md")))
    bench = set(DOC_FLAG.findall(read(ctx, "bench.md"))) | cli
    missing = {c: sorted(help_flags(ctx, c) - (bench if c == "bench" else cli)) for c in COMMANDS}
    missing = {c: m for c, m in missing.items() if m}
    check(not missing, f"flags in --help that the reference does not name: {missing}")


@case
def docs_every_documented_flag_exists(ctx):
    known = set().union(*(help_flags(ctx, c) for c in COMMANDS))
    stale = sorted(table_row_flags(read(ctx, "cli.md")) - known)
    check(not stale, f"docs/cli.md's flag tables name flags no command has: {stale}")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
