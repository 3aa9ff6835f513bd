#!/usr/bin/env python3
"""Include layering: every `#include "..."` in the rooms of docs/architecture.md
must point into the including file's own room or a room its row lists under
"may include". Fails naming file and line for each violation, for a header that
no room holds, and for a source file that belongs to no room.

usage: test_layers.py SOURCE_DIR      check the tree
       test_layers.py --self-test     check that a planted violation is caught
"""
import os
import re
import shutil
import sys
import tempfile

SOURCE_EXT = (".c", ".h", ".cu", ".cc")
TOP_LEVEL = ("common", "models", "planner", "engine", "reports", "cli")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_rooms(doc):
    """{room: set(allowed rooms)} from the '| room | layer | may include | owns |' table."""
    rooms = {}
    in_table = False
    with open(doc, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0] == "room" and cells[2] == "may include":
                in_table = True
                continue
            if not in_table:
                continue
            if not line.startswith("|"):
                break
            if set(cells[0]) <= set("-: "):
                continue
            room = cells[0].strip("`").rstrip("/")
            allowed = set()
            for item in cells[2].split(","):
                item = item.strip().strip("`").rstrip("/")
                if item and item not in ("—", "-"):
                    allowed.add(item)
            rooms[room] = allowed
    return rooms


def room_of(rel, rooms):
    best = None
    for r in rooms:
        if rel == r or rel.startswith(r + "/"):
            if best is None or len(r) > len(best):
                best = r
    return best


def check(src, doc=None):
    doc = doc or os.path.join(src, "docs", "architecture.md")
    problems = []
    try:
        rooms = read_rooms(doc)
    except OSError as e:
        return ["%s: cannot read the layer table: %s" % (doc, e)]
    if not rooms:
        return ["%s: no '| room | layer | may include |' table found" % doc]
    for r, allowed in rooms.items():
        for a in allowed:
            if a not in rooms:
                problems.append("%s: room %s may include '%s', which is no room of the table" % (doc, r, a))
    files = []
    for top in TOP_LEVEL:
        for d, _, names in os.walk(os.path.join(src, top)):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(d, n), src))
    headers = {}
    for rel in files:
        if rel.endswith(".h"):
            headers.setdefault(os.path.basename(rel), []).append(rel)
    for rel in sorted(files):
        mine = room_of(rel, rooms)
        if mine is None:
            problems.append("%s: in no room of %s (add its folder to the table)" % (rel, os.path.relpath(doc, src)))
            continue
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                if "/" in inc and local in files:
                    targets = [local]
                else:
                    targets = headers.get(os.path.basename(inc), [])
                if not targets:
                    problems.append('%s:%d: #include "%s": no room holds this header' % (rel, lineno, inc))
                    continue
                if len(targets) > 1:
                    problems.append('%s:%d: #include "%s" is ambiguous: %s' % (rel, lineno, inc, ", ".join(targets)))
                    continue
                theirs = room_of(targets[0], rooms)
                if theirs != mine and theirs not in rooms[mine]:
                    problems.append('%s:%d: #include "%s" (%s/) goes against the layers: %s/ may include %s'
                                    % (rel, lineno, inc, theirs, mine,
                                       ", ".join(sorted(x + "/" for x in rooms[mine])) or "only itself"))
    return problems


def self_test():
    """A tree with one upward include and one stray folder must fail on exactly those."""
    tmp = tempfile.mkdtemp()
    try:
        def put(rel, text):
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        put("docs/architecture.md", "| room | layer | may include | owns |\n|---|---|---|---|\n"
            "| `common/` | 0 | — | base |\n| `planner/` | 1 | `common/` | plans |\n\nafter\n")
        put("common/dt_error.h", "/* ok */\n")
        put("common/plan.c", '#include "dt_error.h"\n\n#include "dt_solve.h"\n')
        put("planner/dt_solve.h", '#include "dt_error.h"\n')
        put("engine/stray.c", "int x;\n")
        got = check(tmp)
        want = ['common/plan.c:3: #include "dt_solve.h"', "engine/stray.c: in no room"]
        ok = len(got) == 2 and all(any(g.startswith(w) for g in got) for w in want)
        for g in got:
            print("  self-test found: " + g)
        return ok
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        if self_test():
            print("1 passed, 0 failed: a planted upward include and a stray file are caught")
            return 0
        print("0 passed, 1 failed: the self-test's planted violations were not reported as expected")
        return 1
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print("%d layering problem(s); the rules are the table in docs/architecture.md" % len(problems))
        return 1
    print("include layering: every #include follows docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
