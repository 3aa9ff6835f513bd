#!/usr/bin/env python3
"""No circles inside a room: within each room of docs/architecture.md, no two
source files reach into each other, directly or around a longer loop.

File A reaches into file B when A includes (directly or through other headers) a
header that declares a function or an object B defines, and A uses that name.
Two files that do so both ways cannot be read or changed alone; what they share
belongs in a third file both include (a shared helpers header, a block
interface). A header's own static inline functions and macros are nobody's
internals, so sharing them is no circle.

The check reads the sources only (comments and strings blanked): definitions are
non-static functions and objects at the start of a line of a .c / .cc / .cu file,
declarations the prototypes and `extern` objects at the start of a line of a
header. Fails naming each circle, its files and, per step, the names that make it.

usage: test_circles.py SOURCE_DIR      check the tree
       test_circles.py --self-test     check that planted circles are caught
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_layers import INCLUDE, SOURCE_EXT, TOP_LEVEL, read_rooms, room_of  # noqa: E402

HEADER_EXT = (".h",)
# a function's name at the start of a line: "type name(" (not static: file-local)
FUNC = re.compile(r"^(?!static\b|typedef\b|return\b|struct\b|enum\b|union\b|#)"
                  r"(?:extern\s+\"C\"\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")
# an object defined at the start of a line: "type name = ..." or "type name[...] = ..."
OBJECT_DEF = re.compile(r"^(?!static\b|typedef\b|extern\b|return\b|struct\b|enum\b|union\b|#)"
                        r"[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=")
# an object declared in a header: "extern type name;"
OBJECT_DECL = re.compile(r"^extern\s+(?!\"C\")[\w\s\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*;")
WORD = re.compile(r"\b[A-Za-z_]\w*\b")

# Circles known and owned elsewhere: room -> (its files, why it stands and who removes
# it). A known room's circle is reported as known and does not fail; a circle anywhere
# else does, and so does one of a known room that grew beyond the files named.
KNOWN = {}   # none today (cli/dtplan's was ended by cli/dtplan/cli_args.c)


def blank(text):
    """The text with comments and string / char literals emptied (lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def definitions(text):
    """Names of the functions (with a body) and objects a source file defines."""
    names = set()
    lines = text.split("\n")
    for k, line in enumerate(lines):
        m = FUNC.match(line)
        if m:
            rest = "\n".join(lines[k:k + 12])
            brace, semi = rest.find("{"), rest.find(";")
            if brace >= 0 and (semi < 0 or brace < semi):
                names.add(m.group(1))
            continue
        m = OBJECT_DEF.match(line)
        if m:
            names.add(m.group(1))
    return names


def declarations(text):
    """Names of the functions and objects a header declares for others to define."""
    names = set()
    for line in text.split("\n"):
        if line.startswith("static"):
            continue
        m = FUNC.match(line) or OBJECT_DECL.match(line)
        if m:
            names.add(m.group(1))
    return names


def reach(src, rooms):
    """{room: {file: {other: set(names)}}}: who reaches into whom inside each room."""
    files = []
    for top in TOP_LEVEL:
        for d, _, names in os.walk(os.path.join(src, top)):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(d, n), src))
    text, includes = {}, {}
    for rel in files:
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        includes[rel] = [m.group(1) for m in map(INCLUDE.match, raw.split("\n")) if m]
        text[rel] = blank(raw)
    by_base = {}
    for rel in files:
        if rel.endswith(HEADER_EXT):
            by_base.setdefault(os.path.basename(rel), []).append(rel)
    declared = {h: declarations(text[h]) for h in files if h.endswith(HEADER_EXT)}
    definers = {}
    for rel in files:
        if not rel.endswith(HEADER_EXT):
            for name in definitions(text[rel]):
                definers.setdefault(name, set()).add(rel)

    def headers_seen(rel):
        seen, todo = set(), [rel]
        while todo:
            cur = todo.pop()
            for inc in includes.get(cur, []):
                local = os.path.normpath(os.path.join(os.path.dirname(cur), inc))
                for h in ([local] if local in declared else by_base.get(os.path.basename(inc), [])):
                    if h not in seen:
                        seen.add(h)
                        todo.append(h)
        return seen

    graph = {}
    for rel in files:
        if rel.endswith(HEADER_EXT):
            continue
        mine = room_of(rel, rooms)
        if mine is None:
            continue
        used = set(WORD.findall(text[rel]))
        for h in headers_seen(rel):
            for name in declared[h] & used:
                for other in definers.get(name, ()):
                    if other != rel and room_of(other, rooms) == mine:
                        graph.setdefault(mine, {}).setdefault(rel, {}).setdefault(other, set()).add(name)
    return graph


def circles(edges):
    """Strongly connected components of more than one file (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(src, doc=None, known=None, notes=None):
    """Problems (each a failing circle); known circles go to notes."""
    known = KNOWN if known is None else known
    notes = [] if notes is None else notes
    doc = doc or os.path.join(src, "docs", "architecture.md")
    try:
        rooms = read_rooms(doc)
    except OSError as e:
        return ["%s: cannot read the layer table: %s" % (doc, e)]
    problems = []
    for room, edges in sorted(reach(src, rooms).items()):
        for comp in circles(edges):
            steps = []
            for a in comp:
                for b in comp:
                    if b in edges.get(a, {}):
                        names = sorted(edges[a][b])
                        more = " (+%d)" % (len(names) - 3) if len(names) > 3 else ""
                        steps.append("%s uses %s of %s%s" % (os.path.basename(a), ", ".join(names[:3]),
                                                             os.path.basename(b), more))
            line = "%s/: circle between %s: %s" % (room, ", ".join(comp), "; ".join(steps))
            if room in known and set(comp) <= known[room][0]:
                notes.append("known: %s (%s)" % (line, known[room][1]))
            else:
                problems.append(line)
    return problems


# The self-test's tree: a two-file circle (a.c calls b.c's function, b.c reads a.c's
# table, an object), a three-file loop through a header that includes another, and no
# circle between c.c / d.c (a shared inline helper, one-way calls, a name that only
# appears in a comment or a string).
PLANTED = {
    "docs/architecture.md": "| room | layer | may include | owns |\n|---|---|---|---|\n"
                            "| `common/` | 0 | — | base |\n| `engine/model/` | 1 | `common/` | model |\n\nafter\n",
    "engine/model/shared.h": "int b_fn(int x);\nextern const int a_table[4];\n"
                             "static inline int helper(int x) { return x + 1; }\n",
    "engine/model/a.c": '#include "shared.h"\nconst int a_table[4] = {1, 2, 3, 4};\n'
                        "int a_fn(void) { return b_fn(2); }\n",
    "engine/model/b.c": '#include "shared.h"\nint b_fn(int x)\n{\n    return a_table[x];\n}\n',
    "engine/model/ring.h": '#include "ring2.h"\nvoid r1(void);\nvoid r2(void);\n',
    "engine/model/ring2.h": "void r3(void);\n",
    "engine/model/r1.c": '#include "ring.h"\nvoid r1(void) { r2(); }\n',
    "engine/model/r2.c": '#include "ring.h"\nvoid r2(void) { r3(); }\n',
    "engine/model/r3.c": '#include "ring.h"\nvoid r3(void) { r1(); }\n',
    "engine/model/c.c": '#include "shared.h"\nint c_fn(void) { return helper(1) + b_fn(1); }\n',
    "engine/model/d.h": "int d_fn(void);\n",
    "engine/model/d.c": '#include "d.h"\n#include "shared.h"\n'
                        'int d_fn(void) { return helper(2); } /* c_fn() */\nconst char *s = "c_fn(";\n',
    "common/base.c": "int base(void) { return 0; }\n",
}
PLANTED_CIRCLES = ["engine/model/: circle between engine/model/a.c, engine/model/b.c",
                   "engine/model/: circle between engine/model/r1.c, engine/model/r2.c, engine/model/r3.c"]


def self_test():
    """The planted tree fails on its two circles only; a KNOWN entry excuses exactly its files."""
    tmp = tempfile.mkdtemp()
    try:
        for rel, text in PLANTED.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        got = check(tmp, known={})
        print("\n".join("  self-test found: " + g for g in got))
        found = len(got) == 2 and all(any(g.startswith(w) for g in got) for w in PLANTED_CIRCLES)
        notes = []
        got = check(tmp, known={"engine/model": ({"engine/model/a.c", "engine/model/b.c"}, "test")}, notes=notes)
        excused = len(got) == 1 and got[0].startswith(PLANTED_CIRCLES[1]) and len(notes) == 1
        return found and excused
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        if self_test():
            print("1 passed, 0 failed: a planted two-file circle and a three-file loop are caught, "
                  "a one-way use and a shared inline helper are not")
            return 0
        print("0 passed, 1 failed: the self-test's planted circles were not reported as expected")
        return 1
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    notes = []
    problems = check(argv[1], notes=notes)
    for n in notes:
        print(n)
    for p in problems:
        print(p)
    if problems:
        print("%d circle(s); move what the files share into a file both include "
              "(docs/architecture.md \"No circles\")" % len(problems))
        return 1
    print("no circles: no two files of a room reach into each other%s"
          % (" (but %d known, listed above)" % len(notes) if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
