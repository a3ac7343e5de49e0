#!/usr/bin/env python3
"""Counts a crate's size: the lines of its `src/` that are code (no blank line, no comment, no
`#[cfg(test)]` module, no file that only holds tests) and its public items (`pub` fn, struct,
enum, trait, type, const, static, mod and `pub use` names at a module's top level, outside test
modules; `pub(crate)` and the like are not public) apart from the public methods and associated
items of impl blocks. Usage: crate_size.py CRATE_DIR [...]."""
import pathlib
import re
import sys

ITEM = re.compile(r'^\s*pub\s+(?:async\s+|unsafe\s+|const\s+(?=fn))*(fn|struct|enum|trait|type|const|static|mod|use)\b(.*)')


def strip_tests(lines):
    """The lines outside `#[cfg(test)]` items (brace-matched)."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == '#[cfg(test)]':
            depth, started, i = 0, False, i + 1
            while i < len(lines):
                depth += lines[i].count('{') - lines[i].count('}')
                started = started or '{' in lines[i]
                i += 1
                if started and depth <= 0 or (not started and lines[i - 1].rstrip().endswith(';')):
                    break
            continue
        out.append(lines[i])
        i += 1
    return out


def test_only_files(src):
    """Files declared only as `#[cfg(test)] mod NAME;` (a test module in a file of its own)."""
    found = set()
    for path in src.rglob('*.rs'):
        lines = path.read_text().split('\n')
        for prev, line in zip(lines, lines[1:]):
            m = re.match(r'\s*(?:pub(?:\(\w+\))?\s+)?mod\s+(\w+)\s*;', line)
            if m and prev.strip() == '#[cfg(test)]':
                base = path.parent if path.name in ('mod.rs', 'lib.rs') else path.with_suffix('')
                found |= {base / f'{m.group(1)}.rs', base / m.group(1) / 'mod.rs'}
    return found


def count(crate):
    code = items = methods = 0
    src = pathlib.Path(crate, 'src')
    skip = test_only_files(src)
    for path in sorted(src.rglob('*.rs')):
        if path in skip:
            continue
        lines = strip_tests(path.read_text().split('\n'))
        for line in lines:
            s = line.strip()
            if s and not s.startswith('//'):
                code += 1
        joined, open_use = [], False
        for line in lines:
            if open_use:
                joined[-1] += ' ' + line.strip()
            else:
                joined.append(line)
                m = ITEM.match(line)
                open_use = bool(m and m.group(1) == 'use')
            open_use = open_use and not line.rstrip().endswith(';')
        for line in joined:
            m = ITEM.match(line)
            if m:
                kind, rest = m.groups()
                if kind == 'use':
                    body = rest.strip().rstrip(';')
                    inner = body[body.find('{') + 1:body.rfind('}')] if '{' in body else body.split('::')[-1]
                    items += len([n for n in inner.split(',') if n.strip() and n.strip() != 'self'])
                elif line.startswith((' ', '\t')):
                    methods += 1
                else:
                    items += 1
    return code, items, methods


for crate in sys.argv[1:]:
    code, items, methods = count(crate)
    print(f'{crate}: {code} lines of code; {items} public items, {methods} public methods')
