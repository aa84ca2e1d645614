"""The `retro-bench` command of a wheel (`pip install .`): runs the compiled program the wheel carries
(retro_bench/bin/retro-bench), as the cmake and ninja wheels run theirs.

The program starts Python children (plot and report: matplotlib; the closed loop: torch). In a wheel's
environment the interpreter to use is this one, so unless the caller said otherwise:
  RETRO_PYTHON              (plot, report) = this interpreter
  RETRO_CLOSED_LOOP_PYTHON  (closed loop)  = this interpreter, when it has torch and transformers (the
                                             package's core is built for it); else retro-bench's default,
                                             the dump venv (scripts/dump/setup_venv.sh)"""
import importlib.util
import os
import sys


def program():
    """The path of the wheel's retro-bench program (FileNotFoundError when this package has none: a
    source tree or build tree, where build/retro-bench is the program)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "retro-bench")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: this retro_bench package carries no retro-bench program (a source or "
                                "build tree: run build/retro-bench)")
    return path


def main():
    try:
        exe = program()
    except FileNotFoundError as e:
        print(f"retro-bench: error: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.setdefault("RETRO_PYTHON", sys.executable)
    if "RETRO_CLOSED_LOOP_PYTHON" not in env and all(importlib.util.find_spec(m) for m in ("torch", "transformers")):
        env["RETRO_CLOSED_LOOP_PYTHON"] = sys.executable
    os.execve(exe, [exe, *sys.argv[1:]], env)


if __name__ == "__main__":
    sys.exit(main())
