#!/usr/bin/env python3
"""Prints the Debian mirror apt is configured with for a suite (scripts/sam-local.sh's
debootstrap): the first `deb` source, one-line (/etc/apt/sources.list, sources.list.d/*.list) or
deb822 (sources.list.d/*.sources), whose suites include SUITE; nothing if none does.

  sam_local_mirror.py bookworm      ->  http://deb.debian.org/debian (on a stock bookworm)

On a machine that reaches only its package mirror, that mirror is the one address debootstrap
can fetch a root file system from; apt's disabled sources (other file endings, `Enabled: no`) are
skipped as apt skips them.
"""
import glob
import re
import sys


def sources(root="/etc/apt"):
    """(URI, [suite, ...]) of every enabled `deb` source, in apt's reading order."""
    out = []
    for path in [f"{root}/sources.list"] + sorted(glob.glob(f"{root}/sources.list.d/*.list")):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            # `deb [arch=amd64 signed-by=...] URI SUITE COMPONENT...`
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                out.append((words[1], words[2:3]))
    for path in sorted(glob.glob(f"{root}/sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", open(path).read()):
            fields = dict(re.findall(r"(?m)^([A-Za-z-]+):[ \t]*(.*)$", stanza))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                out += [(uri, fields.get("Suites", "").split()) for uri in fields.get("URIs", "").split()]
    return out


if __name__ == "__main__":
    print(next((uri for uri, suites in sources() if sys.argv[1] in suites), ""))
