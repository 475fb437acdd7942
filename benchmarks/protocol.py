"""The benchmark protocol's suite (``jaxpo.experiments.protocol``) from the command line:

    python benchmarks/protocol.py                              # the full suite (GPU-sized)
    python benchmarks/protocol.py --suite mpe --steps 1e6 --seeds 3 --evaluations 20
"""

import sys

from jaxpo.experiments.protocol import main

if __name__ == "__main__":
    sys.exit(main())
