# numpy's matrix product, imported from argv[1] (where the test pip-installed numpy): its time
# goes to OpenBLAS's dgemm kernel, hand-written assembly that no unwind entry covers and that
# uses rbp as a register. Run with OPENBLAS_NUM_THREADS=1 (one thread does the work) and
# OPENBLAS_CORETYPE=Haswell (the same kernel on every x86_64 with AVX2).
import sys

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402

a = np.random.rand(400, 400)


def matmul():
    return a @ a


matmul()
print("ready", flush=True)
while True:
    matmul()
