"""Reading a results directory's runs.jsonl, one reader for the package: one JSON record per line (`retro-bench
run`'s aggregate, the closed loop's), blank lines skipped, in file order."""
import json
import os


def read_runs(path):
    """The records of PATH/runs.jsonl, in file order. A line that is not JSON raises ValueError naming the file
    and the line; a missing file raises FileNotFoundError."""
    name = os.path.join(path, "runs.jsonl")
    records = []
    with open(name, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{name}:{i + 1}: bad JSON: {e}") from e
    return records
