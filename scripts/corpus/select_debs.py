"""Pick Debian source-shipping -dev packages to mine, from the local apt cache only.

    python scripts/corpus/select_debs.py rust 400     # librust-<crate>-dev, most depended-on first
    python scripts/corpus/select_debs.py go 300       # golang-<module>-dev, most depended-on first

Reads ``apt-cache dumpavail`` (the package lists already on this machine; nothing is looked up
on the network) and ranks each crate/module by how many other packages depend on it, a proxy
for "most common". Feature packages (``librust-foo+bar-dev``) are empty metapackages and are
skipped; of several versions of one crate only the newest-named package is kept. Packages
over ``--max-mb`` installed (SDKs with generated API clients, test fixtures) are skipped.
Prints one package name per line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict

PATTERNS = {
    # librust-serde-dev, librust-nom-7-dev, librust-serde+derive-dev (a feature: skipped)
    "rust": re.compile(r"^librust-(?P<name>.+?)(?:-(?P<ver>\d[\d.]*))?(?P<feature>\+.*)?-dev$"),
    # golang-github-pkg-errors-dev, golang-golang-x-net-dev, golang-gopkg-yaml.v3-dev
    "go": re.compile(r"^golang-(?P<name>.+?)(?P<ver>)(?P<feature>)-dev$"),
}
# Generated bindings and API clients: big, repetitive, not how people write code.
SKIP = re.compile(r"(?:^|-)(?:sys|bindings|api|apis|genproto|sdk|fixtures|winapi|windows|web-sys|khronos)(?:-|$)")


def packages() -> dict[str, dict[str, str]]:
    out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    pk: dict[str, dict[str, str]] = {}
    for record in out.split("\n\n"):
        fields: dict[str, str] = {}
        for line in record.split("\n"):
            m = re.match(r"^([\w-]+): (.*)", line)
            if m:
                fields[m.group(1)] = m.group(2)
        if "Package" in fields:
            pk[fields["Package"]] = fields
    return pk


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=sorted(PATTERNS))
    ap.add_argument("count", type=int)
    ap.add_argument("--max-mb", type=float, default=25.0, help="skip packages larger than this installed")
    args = ap.parse_args()
    pat = PATTERNS[args.kind]
    pk = packages()
    by_name: dict[str, list[str]] = defaultdict(list)
    for name in pk:
        m = pat.match(name)
        if m and not m.group("feature"):
            by_name[m.group("name")].append(name)
    rdeps: Counter[str] = Counter()
    for name, fields in pk.items():
        own = pat.match(name)
        deps = set()
        for dep in re.split(r"[,|]", fields.get("Depends", "") + "," + fields.get("Recommends", "")):
            m = pat.match(dep.strip().split(" ")[0])
            if m and not (own and own.group("name") == m.group("name")):
                deps.add(m.group("name"))
        rdeps.update(deps)
    chosen: list[str] = []
    for crate, _ in sorted(((c, n) for c, n in rdeps.items() if c in by_name), key=lambda cn: (-cn[1], cn[0])):
        if SKIP.search(crate):
            continue
        name = sorted(by_name[crate])[-1]  # librust-nom-dev sorts after librust-nom-7-dev
        if float(pk[name].get("Installed-Size", "0")) / 1024 > args.max_mb:
            continue
        chosen.append(name)
        if len(chosen) >= args.count:
            break
    print("\n".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
