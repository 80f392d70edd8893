#!/usr/bin/env python3
"""Fails when a function body in the product code is longer than the limit.

Usage: function_size.py [--max N] [--list] FILE_OR_DIR...   (a folder: its *.cpp and *.hpp, recursively)
       function_size.py --self-test   (the reader on a sample: every function found, with its length)

A small C++ reader, not a compiler: comments and string/char literals
(raw strings included) are blanked first, then every `{` whose preceding
text ends like a function head (`) [const|noexcept|override|final|-> T]`)
and whose parenthesis does not follow if/for/while/switch/catch opens a
function when it is not already inside one; lambdas and local
blocks count toward the function that holds them. The length is the number
of lines from the opening to the closing brace, both included. `--list`
prints every function with its length (to see the reader at work).
"""
import os
import re
import sys

HEAD = re.compile(r"\)\s*(?:(?:const|noexcept|override|final|mutable)\s*|->\s*[\w:<>,\s*&]+)*$")
CONTROL = {"if", "for", "while", "switch", "catch"}


def opener(head):
    """The word before the `(` that matches the head's last `)`: a function's
    name, a control keyword, `]` for a lambda; None when it is cut off."""
    depth = 0
    for i in range(head.rfind(")"), -1, -1):
        if head[i] == ")":
            depth += 1
        elif head[i] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([~\w:]+|\])\s*$", head[:i])
                return m.group(1) if m else ""
    return None


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
            head = re.sub(r"\s+", " ", text[max(0, m.start() - 2000):m.start()]).rstrip()
            # A control statement is told by the word before its own
            # parenthesis, never by an `if (` earlier in the head (which hid
            # every function that followed an if or a for).
            is_fn = bool(HEAD.search(head)) and opener(head) not in CONTROL
            stack.append((m.start(), is_fn, head))
        elif stack:
            start, is_fn, head = stack.pop()
            if is_fn and not any(f for _, f, _ in stack):
                first = text.count("\n", 0, start) + 1
                last = text.count("\n", 0, m.start()) + 1
                name = re.search(r"([~\w:]+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*$", head)
                yield last - first + 1, first, name.group(1) if name else head[-60:]


# --self-test: what the reader must see in code shaped like the product's.
SAMPLE = """
int after_if(int a) {
  if (a > 0) { return 1; }
  return 0;
}
int follows_control(int n) {
  for (int i = 0; i < n; ++i) {
    if (f(g(i))) { continue; }
  }
  while (n--) {}
  auto l = [&](int x) { return x; };
  return l(n);
}
std::string Runner::run(const Command& c) const {
  switch (c.kind) { default: break; }
  return "{";
}
auto trailing(int x) -> std::pair<int, int> {
  return {x, x};
}
Foo::Foo(int a) : a_(a) {
}
"""
SAMPLE_WANT = [("after_if", 4), ("follows_control", 8), ("Runner::run", 4), ("trailing", 3), ("a_", 2)]


def self_test():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(SAMPLE)
    try:
        got = [(name, length) for length, _, name in functions(f.name)]
    finally:
        os.unlink(f.name)
    if got != SAMPLE_WANT:
        print(f"function_size --self-test: the reader saw {got}, not {SAMPLE_WANT}", file=sys.stderr)
        return 1
    print(f"function_size --self-test: {len(got)} functions, as expected")
    return 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
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
