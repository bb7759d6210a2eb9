#!/usr/bin/env python3
"""Print criterion's median estimate (ns) for every benchmark under
target/criterion, one `group/name value` line each. Used to fill
BENCHMARKS.md: run a bench several times, collect these lines, report the
median of the medians.

    python3 benches/medians.py [filter]
"""
import glob
import json
import sys

flt = sys.argv[1] if len(sys.argv) > 1 else ""
for path in sorted(glob.glob("target/criterion/**/new/estimates.json", recursive=True)):
    name = path[len("target/criterion/"):-len("/new/estimates.json")]
    if flt in name:
        est = json.load(open(path))
        print(f"{name} {est['median']['point_estimate']:.2f}")
