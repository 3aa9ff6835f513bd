#!/usr/bin/env python3
"""make_cuda_plan.py IN OUT: the CPU plan IN as a "device": "cuda" plan (the
prediction dropped: dtrun recomputes it for the device). Shared by the tests
that run a CUDA plan through dtrun (tests/gpu/test_cuda_cli.sh,
tests/arch/test_no_cuda.sh)."""
import json
import sys

p = json.load(open(sys.argv[1]))
p["cluster"]["device"] = "cuda"
p["cluster"]["hardware"]["device"] = "cuda"
p.pop("prediction", None)
json.dump(p, open(sys.argv[2], "w"), indent=2)
