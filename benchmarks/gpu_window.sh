#!/usr/bin/env bash
# A lent GPU's window (docs/speed.md, "A lent GPU's window"): from a bare machine, in two
# commands of under 9 minutes each, what the CPU cannot measure, back in one small folder.
#
#   here, once:  bash benchmarks/gpu_window.sh prepare [NAD_REPO_GIT_DIR]
#       the wheels the device's Python (3.12) lacks (Snakemake, jsonschema and theirs) into
#       .whl/, and, given a git directory of github.com/LTS4/neural-anisotropy-directions (the
#       `fetch` of it), the authors' published data into data/nad_paper/ (both git-ignored)
#   there, 1:    bash benchmarks/gpu_window.sh measure
#       nadpipe doctor --gpu: the micro study on the CPU and on CUDA (bf16 and float32 training,
#       1 and 4 jobs per GPU), killed trainings resumed, the NAD benchmark at two network
#       counts and the training variants
#   there, 2:    bash benchmarks/gpu_window.sh search ARCH MINUTES
#       the search of ARCH (resnet18_pub, vgg11_pub, densenet121_pub, lenet_pub) within MINUTES,
#       resumed from docs/data/search/ARCH.csv when there, models not kept
#
# Each device call carries .whl and data/nad_paper. What it measured lands under $OUT (the
# device tool's folder; gpu-window/ elsewhere): logs, tables, the search's table and figure.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-window}
mkdir -p "$OUT"

setup() {  # the carried wheels, then nadpipe from this tree (pure Python: no install)
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
  export PATH="/tmp/site/bin:$PATH"
  python3 -c 'import snakemake, jsonschema, torch, nadpipe; print("nadpipe", nadpipe.__version__,
"torch", torch.__version__, "cuda", torch.cuda.is_available())'
  git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || true
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
}

case "${1:-}" in
prepare)
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  rm -rf .whl && mkdir -p .whl
  python3 - <<'PY'
# every distribution Snakemake and jsonschema need, as wheels for CPython 3.12 on x86-64 Linux:
# pure-Python ones as they are (an sdist built here into a wheel), compiled ones downloaded for
# 3.12; those the device's image has already (its KINDS.md) are left out
import glob, os, re, subprocess, sys, tempfile
from importlib.metadata import version
pip = [sys.executable, "-m", "pip"]
want = [f"snakemake=={version('snakemake')}", "jsonschema"]
have = {"torch", "numpy", "pandas", "pyarrow", "matplotlib", "pyyaml", "tqdm", "psutil",
        "pygments", "jinja2", "markupsafe", "packaging", "requests", "urllib3", "idna",
        "certifi", "charset-normalizer", "attrs", "wrapt", "typing-extensions", "tabulate",
        "python-dateutil", "six", "pillow", "contourpy", "cycler", "fonttools", "kiwisolver",
        "pyparsing", "filelock", "fsspec", "networkx", "sympy", "mpmath", "triton", "setuptools"}
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([*pip, "download", "-q", "-d", tmp, *want], check=True)
    for f in sorted(os.listdir(tmp)):
        name = re.split(r"-\d", f, maxsplit=1)[0].lower().replace("_", "-")
        if name in have:
            continue
        path = os.path.join(tmp, f)
        if f.endswith("-none-any.whl"):
            os.replace(path, os.path.join(".whl", f))
        elif f.endswith(".whl"):  # compiled: the 3.12 build of the same version
            ver = f.split("-")[1]
            subprocess.run([*pip, "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp",
                            *[a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
                                          "manylinux2014_x86_64") for a in ("--platform", p)],
                            "-d", ".whl", f"{name}=={ver}"], check=True)
        else:  # an sdist: built here (pure Python)
            subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", ".whl", path], check=True)
names = sorted(os.listdir(".whl"))
print(f"{len(names)} wheels in .whl/ "
      f"({sum(os.path.getsize(os.path.join('.whl', n)) for n in names) / 2**20:.1f} MiB)")
PY
  if [ -n "${2:-}" ]; then  # the authors' published NADs and curves (reference data, ignored)
    mkdir -p data/nad_paper
    git --git-dir="$2" show HEAD:docs/data/nads.csv > data/nad_paper/nads.csv
    for n in LeNet ResNet18 DenseNet121 VGG11; do
      git --git-dir="$2" show "HEAD:NADs/${n}_NADs.npy" > "data/nad_paper/${n}_NADs.npy"
    done
    ls -la data/nad_paper
  fi
  echo "carry: .whl data/nad_paper"
  ;;
measure)
  setup | tee "$OUT/setup.txt"
  python3 -m nadpipe.cli doctor --gpu --scratch /tmp/doctor 2>&1 | tee "$OUT/doctor-gpu.txt"
  cp /tmp/doctor/doctor-gpu.json "$OUT/" 2>/dev/null || true
  ;;
search)
  arch=${2:?say the architecture: resnet18_pub, vgg11_pub, densenet121_pub or lenet_pub}
  minutes=${3:?say the minutes the search may take}
  setup | tee "$OUT/setup.txt"
  if [ ! -f data/nad_paper/nads.csv ]; then
    echo "data/nad_paper/ is missing: run 'prepare' here with the NAD repository and carry it" >&2
    exit 1
  fi
  resume=()
  if [ -f "docs/data/search/$arch.csv" ]; then resume=(--resume "docs/data/search/$arch.csv"); fi
  printf 'keep_models: false\n' > /tmp/no-weights.yaml
  python3 -m nadpipe.cli search --configfile configs/nad_paper.yaml \
    configs/nad_paper_search_gpu.yaml /tmp/no-weights.yaml --study single_direction \
    --arch "$arch" --axis sigma=0.25,1,4 --rounds 4 --cores "$(nproc)" \
    --snakemake '--resources gpu=8' --budget-minutes "$minutes" "${resume[@]}" \
    2>&1 | tee "$OUT/search-$arch.txt" || true
  from="results-search-single_direction-$arch/search"
  cp "$from"/search.csv "$from"/search.md "$from"/search.png "$OUT/" 2>/dev/null || true
  du -sh "results-search-single_direction-$arch" | tee -a "$OUT/search-$arch.txt"
  ;;
*)
  sed -n '2,19p' "$0"
  exit 2
  ;;
esac
