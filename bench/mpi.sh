#!/usr/bin/env bash
# Data parallel on one machine: `mpirun -np 2 tapegrad bench --threads 1` against one process with
# 2 threads (with and without mpirun), with the share of the step spent summing gradients; then
# the model of several machines (bytes each rank sends per step, its time at 1 and 10 Gbit/s).
#
#   bash bench/mpi.sh                        # small and minimind-26m, 3 rounds
#   ROUNDS=1 PRESETS=small STEPS=5 bash bench/mpi.sh
#
# Each round runs the four variants one after the other (alternating, so a change in machine
# load hits all of them); the table gives medians over the rounds. No process is bound to a core
# (mpirun --bind-to none, as the single process is not): the ranks and threads share the cores
# the way tapegrad's own pool does.
#
# Environment: ROUNDS (3), PRESETS ("small minimind-26m"), STEPS (7), TAPEGRAD (build/tapegrad),
# MPIRUN (mpirun), JSON_DIR (keep every raw result there).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
tapegrad="${TAPEGRAD:-$repo/build/tapegrad}"
mpirun="${MPIRUN:-mpirun}"
rounds="${ROUNDS:-3}"
presets="${PRESETS:-small minimind-26m}"
steps="${STEPS:-7}"

[ -x "$tapegrad" ] || { echo "mpi.sh: $tapegrad not built (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2)" >&2; exit 1; }
command -v "$mpirun" >/dev/null || { echo "mpi.sh: no $mpirun (apt-get install openmpi-bin libopenmpi-dev, then rebuild)" >&2; exit 1; }
launch=("$mpirun" --oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && launch+=(--allow-run-as-root)

out_dir="${JSON_DIR:-$(mktemp -d /tmp/tapegrad-mpi-XXXXXX)}"
mkdir -p "$out_dir"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(uptime | sed 's/.*load/load/')"
echo "$("$mpirun" --version | head -1); $rounds rounds of $steps timed steps; raw results in $out_dir"
for round in $(seq 1 "$rounds"); do
    for preset in $presets; do
        common=(bench --preset "$preset" --steps "$steps" --json)
        echo "round $round: $preset ..." >&2
        "$tapegrad" "${common[@]}" --threads 2 > "$out_dir/$preset-1proc-$round.json"
        "${launch[@]}" -np 1 "$tapegrad" "${common[@]}" --threads 2 > "$out_dir/$preset-np1-$round.json"
        "${launch[@]}" -np 2 "$tapegrad" "${common[@]}" --threads 1 > "$out_dir/$preset-np2-$round.json"
        "${launch[@]}" -np 2 "$tapegrad" "${common[@]}" --threads 1 --reduce allreduce \
            > "$out_dir/$preset-np2allreduce-$round.json"
    done
done
echo "load after: $(uptime | sed 's/.*load/load/')"

python3 - "$out_dir" $presets <<'PY'
import glob, json, statistics, sys
out_dir, presets = sys.argv[1], sys.argv[2:]
variants = [("1proc", "`tapegrad bench --threads 2`"),
            ("np1", "`mpirun -np 1 ... --threads 2`"),
            ("np2", "`mpirun -np 2 ... --threads 1`"),
            ("np2allreduce", "`mpirun -np 2 ... --threads 1 --reduce allreduce`")]
def runs(preset, v):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{out_dir}/{preset}-{v}-*.json"))]
med = lambda rs, k: statistics.median(r[k] for r in rs)
params = {}
step_ms = {}
for preset in presets:
    base = runs(preset, "1proc")
    t = base[0]
    params[preset] = t["params"]
    step_ms[preset] = (med(base, "ms_per_step"), t["batch"] * t["seq"])
    print(f"\n{preset}: {t['params']:,} parameters, batch {t['batch']} x seq {t['seq']} per rank; medians of {len(base)} rounds")
    print("| run | tokens/s | vs 1 process | ms/step | gradient sum, ms | share of the step | waiting for the other rank, ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ref = med(base, "tokens_per_s")
    for v, label in variants:
        rs = runs(preset, v)
        comm = f"{med(rs, 'ms_comm'):.1f}" if rs[0]["ranks"] > 1 else "-"
        share = f"{100 * med(rs, 'comm_share'):.1f}%" if rs[0]["ranks"] > 1 else "-"
        wait = f"{med(rs, 'ms_wait'):.1f}" if rs[0]["ranks"] > 1 else "-"
        print(f"| {label} | {med(rs, 'tokens_per_s'):,.0f} | {med(rs, 'tokens_per_s') / ref:.2f}x | "
              f"{med(rs, 'ms_per_step'):.1f} | {comm} | {share} | {wait} |")
    print("rounds, tokens/s: " + "; ".join(
        f"{v} " + ", ".join(f"{r['tokens_per_s']:.0f}" for r in runs(preset, v)) for v, _ in variants))

# Several machines: each rank sends and receives 2 (N-1)/N of the float32 gradients per step (the
# reduce-scatter, then the all-gather): 4P bytes at N = 2, towards 8P as N grows. tapegrad sums
# after the backward, so that time adds to the step's compute. Parameter counts of the presets
# not measured above are those `tapegrad bench` reports for them.
known = {"tiny": 104768, "small": 1620096, "minimind-26m": 25829888}
known.update(params)
gbit = {"1 Gbit/s": 125e6, "10 Gbit/s": 1250e6}   # bytes per second, one direction
print("\nSeveral machines, one rank each: what each rank sends (and receives) per step, and its time")
print("| preset | parameters | MB per rank per step, N = 2 / large N | at 1 Gbit/s | at 10 Gbit/s |")
print("|---|---:|---:|---:|---:|")
for preset, p in known.items():
    b2, bn = 4 * p, 8 * p
    times = [f"{1e3 * b2 / bw:.1f} / {1e3 * bn / bw:.1f} ms" for bw in gbit.values()]
    print(f"| {preset} | {p:,} | {b2 / 1e6:.1f} / {bn / 1e6:.1f} | {times[0]} | {times[1]} |")
if step_ms:
    print("\nWhere compute stops hiding it: the tokens each rank must compute per step for the gradient sum (large N)")
    print("to take at most 10% of the step, from this machine's compute time per token (1 process, 2 threads)")
    print("| preset | compute, us per token | tokens per rank per step, 1 Gbit/s | 10 Gbit/s |")
    print("|---|---:|---:|---:|")
    for preset, (ms, tokens) in step_ms.items():
        per_token = ms / 1e3 / tokens
        need = [8 * known[preset] / bw / 0.1 / per_token for bw in gbit.values()]
        print(f"| {preset} | {1e6 * per_token:.1f} | {need[0]:,.0f} | {need[1]:,.0f} |")
PY
