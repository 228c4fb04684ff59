import sys

from autodeuq.app.cli import main

sys.exit(main())
