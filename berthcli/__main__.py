import sys

from berthcli.main import main

sys.exit(main())
