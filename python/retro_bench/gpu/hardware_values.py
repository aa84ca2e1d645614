"""Writes a hardware profile (configs/hardware/<name>.json) as "key value" lines for retro_gpu_check
--hardware: the RETRO_GPU_ONLY build has no JSON library (docs/cuda.md). Standard library only.

usage: hardware-values.py PROFILE.json > values.txt
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        profile = json.load(f)
    print(f"name {profile['name']}")
    for key, field in profile.items():
        if isinstance(field, dict) and "value" in field:
            print(f"{key} {field['value']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
