import sys

from hpcvar.cli import main

sys.exit(main())
