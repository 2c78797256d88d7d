"""``python -m gale.bytewax wordcount:flow -w 2``: run a Bytewax dataflow on Gale in this process."""

import sys

from gale.bytewax import main

sys.exit(main())
