"""The largest files and longest functions (in lines) under the given folders: what a newcomer has to
hold at once. C/C++/CUDA functions are found by brace matching from a line that opens a function body
(a signature ending in `{`, not a control statement, class or namespace; inline member functions
count, lambdas count with the function around them); Python functions by `ast` (each def on its own,
nested ones too); shell functions by `name() {` to the matching `}`.

    python/retro_bench/tools/code_size.py lib scripts          # top 5 of each, per folder
    python/retro_bench/tools/code_size.py --top 10 lib/trace
"""
import argparse
import ast
import os
import re
import sys

CPP = (".cpp", ".hpp", ".h", ".cu", ".cuh")
CONTROL = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch|namespace|struct|class|enum|union|extern)\b")
SIGNATURE = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s&*]+)?\{\s*$")


def strip_code(line, in_comment):
    """The line without comments and string/char literals; whether a /* comment continues."""
    out, i = [], 0
    while i < len(line):
        if in_comment:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out), True
            i, in_comment = j + 2, False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_comment, i = True, i + 2
        elif line[i] in "\"'":
            q, i = line[i], i + 1
            while i < len(line) and line[i] != q:
                i += 2 if line[i] == "\\" else 1
            i += 1
            out.append(" ")
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_comment


def cpp_functions(lines):
    """(name, first line, length) of every outermost function body."""
    found, depth, start, in_comment, name = [], 0, None, False, ""
    for n, raw in enumerate(lines, 1):
        code, in_comment = strip_code(raw, in_comment)
        if start is None and SIGNATURE.search(code) and not CONTROL.match(code) and "[" not in code.split("(")[0]:
            head = code.split("(")[0].split()
            if head:
                start, start_depth, name = n, depth, head[-1]
        depth += code.count("{") - code.count("}")
        if start is not None and depth <= start_depth:
            found.append((name, start, n - start + 1))
            start = None
    return found


def py_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(f.name, f.lineno, f.end_lineno - f.lineno + 1) for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]


def sh_functions(lines):
    found, start = [], None
    for n, line in enumerate(lines, 1):
        m = re.match(r"^(\w[\w-]*)\s*\(\)\s*\{", line)
        if m and start is None:
            start, name = n, m.group(1)
        elif start is not None and line.startswith("}"):
            found.append((name, start, n - start + 1))
            start = None
    return found


def scan(root):
    files, funcs = [], []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("__pycache__", "fixtures", "build")]
        for f in names:
            path = os.path.join(d, f)
            ext = os.path.splitext(f)[1]
            if ext not in CPP + (".py", ".sh"):
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            lines = text.splitlines()
            files.append((len(lines), path))
            fs = cpp_functions(lines) if ext in CPP else py_functions(text) if ext == ".py" else sh_functions(lines)
            funcs += [(length, f"{path}:{line} {name}") for name, line, length in fs]
    return sorted(files, reverse=True), sorted(funcs, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    for root in a.folders:
        if not os.path.isdir(root):
            sys.exit(f"code-size: {root}: not a folder")
        files, funcs = scan(root)
        print(f"{root}: {len(files)} files")
        print("  largest files (lines):")
        for n, p in files[: a.top]:
            print(f"    {n:6d}  {p}")
        print("  longest functions (lines):")
        for n, p in funcs[: a.top]:
            print(f"    {n:6d}  {p}")


if __name__ == "__main__":
    main()
