"""`python tests/sealing/classified_cli.py ARGS...`: the lockstep command line with the sealing tests'
classification installed, so a CLI process seals what the in-process engine of the tests would.

MERGE(i16-classify): once core/sensitive.py is merged, the tests run `python -m lockstep` instead
(the real classification is then in every process) and this file goes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from sealkit import classification_double

from lockstep.app import kernel
from lockstep.cli import main

kernel.classify = classification_double
main()
