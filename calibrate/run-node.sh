#!/bin/bash
# One calibration session on a GPU node, as run for the committed profiles: a quick run, a full run at the paper's
# 22B layer, whole-layer runs at two Megatron-LM H100 table shapes (t = 1 and t = 2), then calibrate/torch_bench.py
# (FP8 GEMMs and fused attention through PyTorch) and calibrate/torch_sync_gap.py (the host gap after a synchronise).
# Usage: calibrate/run-node.sh OUTDIR [BINARY]
# Each step has its own time limit; a failing step is logged and the next one still runs. Everything goes to
# OUTDIR: node.log (all output), dmon.log (power and clocks each second), quick.yaml, full.yaml, layer-1p7b.yaml,
# layer-7b.yaml, layer-70b.yaml, torch.json, sync-gap.json.
set -u
out=${1:?usage: calibrate/run-node.sh OUTDIR [BINARY]}
bin=${2:-build-cal/strata-calibrate}
log=$out/node.log
mkdir -p "$out"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia,os;p=nvidia.__path__[0];print(" ".join(os.path.join(p,x,"lib") for x in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
export LD_LIBRARY_PATH
step() { local name=$1 limit=$2; shift 2; echo "=== $name: $* (limit ${limit}s) $(date -u +%T)" >>"$log"
  local t0=$SECONDS; timeout "$limit" "$@" >>"$log" 2>&1; local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" >>"$log"; return $rc; }
{ nvidia-smi; nvidia-smi -q | grep -iE 'clocks|MHz|power limit|product name' | head -30; uname -a; } >>"$log" 2>&1
nvidia-smi dmon -s pc -d 1 -o T >"$out/dmon.log" 2>&1 &
dmon=$!
if ! "$bin" --help >/dev/null 2>>"$log"; then
  echo "=== carried binary does not run here; building" >>"$log"; ldd "$bin" >>"$log" 2>&1
  nccl=$(python3 -c 'import nvidia.nccl,os;print(nvidia.nccl.__path__[0])' 2>/dev/null)
  NCCL_HOME=$nccl step build 240 sh -c "cmake -S calibrate -B /tmp/bc -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && ninja -C /tmp/bc"
  bin=/tmp/bc/strata-calibrate
fi
step quick 100 "$bin" --quick --out "$out/quick.yaml"
step full 220 "$bin" --out "$out/full.yaml"
step layer-1p7b 70 "$bin" --heads 16 --hidden 2048 --seq 4096 --microbatch 1 --tensor 1 --out "$out/layer-1p7b.yaml"
step layer-7b 70 "$bin" --heads 32 --hidden 4096 --seq 4096 --microbatch 1 --tensor 2 --out "$out/layer-7b.yaml"
step layer-70b 70 "$bin" --heads 64 --hidden 8192 --seq 4096 --microbatch 1 --tensor 8 --out "$out/layer-70b.yaml"
PYTHONUNBUFFERED=1 step torch 100 python3 calibrate/torch_bench.py "$out/torch.json"
PYTHONUNBUFFERED=1 step sync-gap 180 python3 calibrate/torch_sync_gap.py "$out/sync-gap.json"
kill $dmon 2>/dev/null
echo "=== done $(date -u +%T)" >>"$log"
