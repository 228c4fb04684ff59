import sys

from autodeuq.cli import main

sys.exit(main())
