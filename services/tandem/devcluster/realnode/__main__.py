"""``python -m tandem.devcluster.realnode PLAN.json [--watch-stdin]``: the supervisor."""

import sys

from tandem.devcluster.realnode.supervisor import main

sys.exit(main())
