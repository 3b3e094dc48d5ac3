#!/usr/bin/env bash
# Install the chunked vLLM 0.26.0 wheel set on the GPU machine (no network there).
#
# Contract. Run from the repository root on the GPU machine, once per device call, with the kit in
# .gpu/kit (manifest.json written by bench/gpu/wheels.py pack) and this call's part(s) in .gpu/cN/.
# Each call copies the parts it carries into $CHUNKS (default /tmp/gpu-chunks, outside the checkout:
# it survives between calls while the machine stays warm) after checking their sha256. Once every
# part of the manifest is there, it joins them, checks the tar's sha256, unpacks the wheels and
# installs them with `pip install --no-index --no-deps --no-compile --target $SITE` (default
# /tmp/site), then imports vLLM with PYTHONPATH=$SITE. Exit 0: installed (or already installed);
# 3: parts still missing (expected on all but the last chunk call); anything else: a failure.
set -euo pipefail
KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GPU="${GPU_DIR:-$(dirname "$KIT")}"
CHUNKS="${CHUNKS:-/tmp/gpu-chunks}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$CHUNKS"

if [ -f "$SITE/.installed" ]; then
    echo "install.sh: already installed in $SITE"
    exit 0
fi

python3 - "$KIT/manifest.json" "$GPU" "$CHUNKS" <<'PY'
import hashlib, json, shutil, sys
from pathlib import Path

manifest, gpu, chunks = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), Path(sys.argv[3])
for part in manifest["parts"]:
    carried = gpu / part["file"]
    if carried.exists():
        if hashlib.sha256(carried.read_bytes()).hexdigest() != part["sha256"]:
            sys.exit(f"install.sh: {carried}: sha256 differs from the manifest")
        shutil.copyfile(carried, chunks / Path(part["file"]).name)
        print(f"install.sh: part {part['file']} stored in {chunks}")
have = [p for p in manifest["parts"] if (chunks / Path(p["file"]).name).exists()]
missing = [p["file"] for p in manifest["parts"] if p not in have]
print(f"install.sh: {len(have)}/{len(manifest['parts'])} parts present; missing: {missing or 'none'}")
sys.exit(3 if missing else 0)
PY

WORK="$(mktemp -d /tmp/gpu-wheels.XXXX)"
python3 - "$KIT/manifest.json" "$CHUNKS" "$WORK" <<'PY'
import hashlib, json, sys, tarfile
from pathlib import Path

manifest, chunks, work = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), Path(sys.argv[3])
tar_path = work / "wheels.tar"
digest = hashlib.sha256()
with tar_path.open("wb") as out:
    for part in manifest["parts"]:
        data = (chunks / Path(part["file"]).name).read_bytes()
        digest.update(data)
        out.write(data)
if digest.hexdigest() != manifest["tar_sha256"]:
    sys.exit("install.sh: joined tar differs from the manifest")
with tarfile.open(tar_path) as tar:
    tar.extractall(work / "wheels", filter="data")
tar_path.unlink()
print(f"install.sh: {len(list((work / 'wheels').glob('*.whl')))} wheels unpacked")
PY

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WORK"/wheels/*.whl
rm -rf "$WORK"
PYTHONPATH="$SITE" python3 -c "import vllm; from vllm import LLM; print('install.sh: vllm', vllm.__version__, 'imports')"
touch "$SITE/.installed"
