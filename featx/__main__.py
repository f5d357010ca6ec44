import sys

from featx.cli import main

sys.exit(main())
