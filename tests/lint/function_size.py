#!/usr/bin/env python3
"""Fails when a function body in the product code is longer than the limit.

Usage: function_size.py [--max N] [--list] FILE_OR_DIR...   (a folder: its *.cpp and *.hpp, recursively)

A small C++ reader, not a compiler: comments and string/char literals
(raw strings included) are blanked first, then every `{` whose preceding
text ends like a function head (`) [const|noexcept|override|final|-> T]`)
opens a function when it is not already inside one; lambdas and local
blocks count toward the function that holds them. The length is the number
of lines from the opening to the closing brace, both included. `--list`
prints every function with its length (to see the reader at work).
"""
import os
import re
import sys

HEAD = re.compile(r"\)\s*(?:(?:const|noexcept|override|final|mutable)\s*|->\s*[\w:<>,\s*&]+)*$")
CONTROL = re.compile(r"\b(?:if|for|while|switch|catch)\s*\(.*\)\s*$")


def blank(src):
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        raw = re.match(r'R"([^(\s]*)\(', src[i:i + 24])
        if raw and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = ")" + raw.group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        c = src[i]
        if c in "\"'" and not (c == "'" and i > 0 and src[i - 1].isalnum()):
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    text = blank(open(path, encoding="utf-8").read())
    stack = []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            head = re.sub(r"\s+", " ", text[max(0, m.start() - 400):m.start()]).rstrip()
            is_fn = bool(HEAD.search(head)) and not CONTROL.search(head[-200:])
            stack.append((m.start(), is_fn, head))
        elif stack:
            start, is_fn, head = stack.pop()
            if is_fn and not any(f for _, f, _ in stack):
                first = text.count("\n", 0, start) + 1
                last = text.count("\n", 0, m.start()) + 1
                name = re.search(r"([~\w:]+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*$", head)
                yield last - first + 1, first, name.group(1) if name else head[-60:]


def main(argv):
    limit, listing, files = 80, False, []
    it = iter(argv)
    for a in it:
        if a == "--max":
            limit = int(next(it))
        elif a == "--list":
            listing = True
        elif os.path.isdir(a):
            for d, _, names in sorted(os.walk(a)):
                files += [os.path.join(d, n) for n in sorted(names) if n.endswith((".cpp", ".hpp"))]
        else:
            files.append(a)
    if not files:
        print("function_size: no files given", file=sys.stderr)
        return 2
    over, count = [], 0
    for path in files:
        for length, line, name in functions(path):
            count += 1
            if listing:
                print(f"{length:4d} {path}:{line} {name}")
            if length > limit:
                over.append(f"{path}:{line}: {name} is {length} lines (limit {limit}); split it into smaller steps")
    if count == 0:
        print("function_size: found no functions; the reader is broken", file=sys.stderr)
        return 2
    for o in over:
        print(o)
    print(f"function_size: {count} functions in {len(files)} files, {len(over)} over {limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
