#!/usr/bin/python3
"""Writes the tiny random-weight models of the architectures named (a
comma-separated list: tests/support/arch_models.py's ARCHES) into a
folder, around llama.cpp's SPM vocabulary, and prints their paths, one a
line: `make bench-serve BENCH_FAMILIES=gemma3,lfm2` benches them.

  tests/bench/family_models.py OUT_DIR ARCH[,ARCH...]
"""

import os
import sys

from support import arch_models

if len(sys.argv) != 3:
    raise SystemExit(__doc__)
os.makedirs(sys.argv[1], exist_ok=True)
for arch in sys.argv[2].split(","):
    print(arch_models.write(arch, "llama-spm", sys.argv[1], context=131072))
