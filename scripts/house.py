#!/usr/bin/env python3
"""The house rules a reviewer checks by eye, checked by a machine over the tracked Rust sources:
no file over 600 lines, no module preamble (the leading `//!` block) over 20 lines, and no issue
number in code or in a comment. Prints each breach as `path:line: what` and exits 1 if any.
Usage: scripts/house.py [--list] (run from anywhere inside the repository)."""
import re
import subprocess
import sys

MAX_LINES = 600
MAX_PREAMBLE = 20
# "issue 12", "issues 11 and 13", "(#12)", "issue #12": the tracker's numbers belong in git.
ISSUE = re.compile(r'\bissues?\s+#?\d+|\(#\d+\)', re.IGNORECASE)


def tracked_sources():
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True, text=True,
                          check=True).stdout.strip()
    files = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '*.rs'],
                           capture_output=True, text=True, check=True, cwd=root).stdout.split()
    return root, files


def breaches(root, path):
    try:
        with open(f'{root}/{path}', encoding='utf-8') as f:
            lines = f.read().split('\n')
    except FileNotFoundError:
        return
    if len(lines) > MAX_LINES + 1:
        yield f'{path}:1: {len(lines) - 1} lines (at most {MAX_LINES})'
    preamble = 0
    for line in lines:
        if not line.startswith('//!'):
            break
        preamble += 1
    if preamble > MAX_PREAMBLE:
        yield f'{path}:1: a preamble of {preamble} lines (at most {MAX_PREAMBLE})'
    for n, line in enumerate(lines, 1):
        if ISSUE.search(line):
            yield f'{path}:{n}: an issue number: {line.strip()}'


def main():
    root, files = tracked_sources()
    found = [b for path in files for b in breaches(root, path)]
    for b in found:
        print(b)
    if '--list' not in sys.argv and found:
        print(f'{len(found)} breaches of the house rules', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
