"""Print pyproject.toml's runtime requirements and those of the named extras, one a line.

The Dockerfiles install them in a layer of their own, from pyproject.toml alone, so the
layer is rebuilt only when the requirements change, not with every source change:
    python3 images/requirements.py pyproject.toml [EXTRA...] > requirements.txt
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as pyproject:
    project = tomllib.load(pyproject)["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[2:]:
    requirements += project["optional-dependencies"][extra]
print("\n".join(requirements))
