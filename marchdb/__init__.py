"""marchdb: a local memory engine for AI agents."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

if "numpy" not in _sys.modules and "OPENBLAS_THREAD_TIMEOUT" not in _os.environ:
    # OpenBLAS (numpy's, for the in-memory KNN) keeps its threads spinning
    # for ~2^28 cycles after each product. The query embedding that follows
    # then finds no idle core and runs on one thread beside a spinning one:
    # a warm recall at 10,000 memories took 41 ms p50, 33 ms with the threads
    # sleeping at once (2^4 cycles); the KNN itself stayed at ~2 ms. OpenBLAS
    # reads this when numpy loads; a user's own setting wins.
    _os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
