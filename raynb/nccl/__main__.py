"""In any process: ``python -m raynb.nccl [--json] [--expect-efa] LOGFILE...``"""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
