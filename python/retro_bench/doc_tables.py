"""The tables of the docs, regenerated from files committed in the repository (issue 42 #3).

A generated table sits in a Markdown file between two comments naming the command that prints it:

    <!-- generated: retro_bench.closedloop.claims --common results/closedloop-qwen2.5-0.5b-32k -->
    ...the command's standard output, as it printed it...
    <!-- end generated -->

The command is a module of this package (`retro_bench.X ...`, run as `python -m`) or a Python script of
the repository (`scripts/X.py ...`), with arguments (paths relative to the repository root, no shell).
It runs with this interpreter, the root as its working directory, and must print the same bytes from the
same files on any machine.

    python -m retro_bench.doc_tables --check [FILE.md ...]   # exit 1 naming every block that differs
    python -m retro_bench.doc_tables --write [FILE.md ...]   # rewrite the blocks in place (atomically)

Default files: every Markdown file under docs/ (docs/methods/ too) and README.md. A number in a doc outside such a block is prose; a table a
doc shows without a block has no file behind it."""

import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

from ._launch import launch_command
from .atomic import write_text

BEGIN = re.compile(r"^<!-- generated: (.+?) -->\n", re.M)
END = "<!-- end generated -->\n"
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", ".."))


class DocTablesError(Exception):
    pass


def blocks(text, where):
    """[(command, start, end)]: each generated block's command and the span of its body in text."""
    out = []
    for m in BEGIN.finditer(text):
        end = text.find(END, m.end())
        nxt = BEGIN.search(text, m.end())
        if end < 0 or (nxt and nxt.start() < end):
            line = text.count("\n", 0, m.start()) + 1
            raise DocTablesError(f"{where}:{line}: '<!-- generated: {m.group(1)} -->' has no '{END.strip()}' before the next block")
        out.append((m.group(1), m.end(), end))
    return out


def command_argv(command, root=ROOT):
    """The argument vector of a block's command: a package module or a repository script, nothing else."""
    args = shlex.split(command)
    if not args:
        raise DocTablesError("an empty command")
    if args[0].startswith("retro_bench."):
        return [*launch_command(args[0]), *args[1:]]
    if args[0].startswith("scripts/") and args[0].endswith(".py") and os.path.isfile(os.path.join(root, args[0])):
        return [sys.executable, "-B", os.path.join(root, args[0]), *args[1:]]
    raise DocTablesError(f"'{command}': a command is a module retro_bench.X or a script scripts/X.py of the repository")


def run(command, root=ROOT):
    """The command's standard output (DocTablesError with its stderr when it fails)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(command_argv(command, root), cwd=root, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise DocTablesError(f"'{command}' failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout if p.stdout.endswith("\n") else p.stdout + "\n"


def regenerate(text, where, root=ROOT):
    """(new text, [(command, line, differs)]) with every block's body replaced by its command's output."""
    out, pos, report = [], 0, []
    for command, start, end in blocks(text, where):
        fresh = run(command, root)
        out += [text[pos:start], fresh]
        report.append((command, text.count("\n", 0, start), fresh != text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out), report


def default_files(root=ROOT):
    return sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)) + [os.path.join(root, "README.md")]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m retro_bench.doc_tables", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a block differs from its command's output")
    mode.add_argument("--write", action="store_true", help="rewrite every block with its command's output")
    ap.add_argument("files", nargs="*", help="Markdown files (default: every docs/**/*.md and README.md)")
    ap.add_argument("--root", default=ROOT, help="the repository root the commands run in")
    args = ap.parse_args(argv)
    files = args.files or default_files(args.root)
    total, differ = 0, []
    try:
        for path in files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(path, args.root)
            new, report = regenerate(text, rel, args.root)
            total += len(report)
            differ += [f"{rel}:{line + 1}: {cmd}" for cmd, line, d in report if d]
            if args.write and new != text:
                write_text(path, new)
    except (DocTablesError, OSError) as e:
        print(f"doc_tables: error: {e}", file=sys.stderr)
        return 2
    if differ and args.check:
        print(f"{len(differ)} of {total} generated table(s) differ from their files (rerun with --write, or "
              "find what changed the files):\n  " + "\n  ".join(differ), file=sys.stderr)
        return 1
    verb = "rewrote" if args.write else "checked"
    print(f"doc_tables: {verb} {total} generated table(s) in {len(files)} file(s)"
          + (f"; {len(differ)} changed" if args.write else ": all equal their files"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
