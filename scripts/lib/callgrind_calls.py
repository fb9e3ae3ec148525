#!/usr/bin/env python3
"""Calls to the named functions in a callgrind profile, summed over callers.

usage: callgrind_calls.py PROFILE NAME...
Prints one "NAME COUNT" line per name. A name matches a function whose
demangled name ends with it (`__rust_alloc` matches `__rustc::__rust_alloc`).
callgrind writes a call as a `cfn=` line (the callee) followed by a
`calls=COUNT ...` line; a function's name is given in full the first time
its id appears, in an `fn=` or a `cfn=` line, and by `(id)` alone after.
"""
import re
import sys

path, wanted = sys.argv[1], sys.argv[2:]
names, totals, callee = {}, dict.fromkeys(wanted, 0), None
with open(path, errors="replace") as profile:
    for line in profile:
        if line.startswith(("fn=", "cfn=")):
            match = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
            if match and match.group(2):
                names[match.group(1)] = match.group(2)
            if match and line.startswith("cfn="):
                callee = names.get(match.group(1))
        elif line.startswith("calls=") and callee is not None:
            count = int(line[len("calls="):].split()[0])
            for name in wanted:
                if callee.endswith(name):
                    totals[name] += count
            callee = None
for name in wanted:
    print(name, totals[name])
