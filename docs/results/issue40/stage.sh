# Issue 40's device run, first call: keeps the shipped model and the binaries of the commit before
# the change (a3baf26: gpu-before.tar.xz, fp8lm alone, stripped with the libraries a CUDA image
# lacks) in /tmp/keep/ on the warm machine, because the working tree, the fixtures, the model and two
# sets of binaries do not fit one call's 64 MiB. The second call (run.sh) runs both.
set -eu
mkdir -p /tmp/keep/before
cp -r models /tmp/keep/
tar xJf gpu-before.tar.xz -C /tmp/keep/before
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
du -sh /tmp/keep/*
