#!/usr/bin/python3
"""tapegrad's model trained by PyTorch on the CPU: the reference `tapegrad bench` is compared with.

usage: /usr/bin/python3 bench/torch_reference.py --preset small [--ffn relu] [--precision bf16]
                                                  [--threads 2] [--steps 7] [--warmup 2] [--json]
       /usr/bin/python3 bench/torch_reference.py --describe     # every preset's shapes, as JSON

The model is bench/torch_model.py's (the one the parity test holds tapegrad to), at the shapes
`tapegrad bench --preset NAME` runs. A timed step is the one `tapegrad bench` times: random
tokens, zero the gradients, forward and loss, backward, clip the gradient norm at 1.0, AdamW
(lr 5e-4, betas 0.9 / 0.95, weight decay 0.1 on the matrices). After --warmup untimed steps
every step is timed and the median step is reported, as tapegrad reports its own.
--precision bf16 runs forward and loss under torch.autocast("cpu", torch.bfloat16), PyTorch's
mixed precision on a CPU (weights, gradients and AdamW stay fp32).

PyTorch at its best on the machine:
- OMP_WAIT_POLICY=passive unless it is set: the OpenMP workers sleep between the many small
  ops of a step instead of spinning against the BLAS threads.
- OpenBLAS's kernel. OpenBLAS 0.3.21 does not know every CPU: on Intel family 6 model 207
  (Emerald Rapids) it falls back to its SSE3 "Prescott" kernels, and on AMD family 26 (Zen 5)
  it takes its AVX2 "Haswell" ones. When OPENBLAS_CORETYPE is unset and OpenBLAS picks a
  kernel below the CPU's instructions, the script runs itself again with the one that fits
  (Cooperlake on an Intel CPU with AVX512-BF16, SkylakeX on other AVX-512 CPUs, Haswell or Zen
  on AVX2 ones) and says so in its output (openblas_core, openblas_core_auto). A given
  OPENBLAS_CORETYPE is kept.
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORE_AUTO_MARK = "TAPEGRAD_TORCH_CORE_AUTO"  # set on the second run, after choosing the kernel

# OpenBLAS kernels, by the instructions they use: a lower rank runs less of the CPU
OPENBLAS_RANK = {
    "prescott": 0, "core2": 0, "penryn": 0, "dunnington": 0, "nehalem": 0, "atom": 0, "barcelona": 0,
    "opteron": 0, "opteron_sse3": 0, "athlon": 0, "nano": 0,
    "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1, "excavator": 1,
    "haswell": 2, "zen": 2, "skylakex": 3, "cooperlake": 4, "sapphirerapids": 5,
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="tiny, small, minimind-26m or minimind-3 (default small)")
    p.add_argument("--ffn", default="swiglu", help="swiglu or relu (relu: hidden 4 x dim, as tapegrad bench)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    p.add_argument("--batch", type=int, default=0, help="sequences per step (default: the preset's bench batch)")
    p.add_argument("--seq", type=int, default=0, help="tokens per sequence (default: the preset's context)")
    p.add_argument("--threads", type=int, default=2, help="torch's threads and OpenBLAS's (default 2)")
    p.add_argument("--steps", type=int, default=7, help="timed steps, whose median is reported (default 7)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--describe", action="store_true",
                   help="print every preset's shapes and parameter count, per FFN, as JSON, and exit")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.threads < 1 or a.batch < 0 or a.seq < 0:
        p.error("need --steps >= 1, --warmup >= 0, --threads >= 1, --batch and --seq >= 0")
    return a


def cpu_facts():
    """(vendor, set of flags) from /proc/cpuinfo; empty when it cannot be read."""
    vendor, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return vendor, flags


def fitting_openblas_core(vendor, flags):
    """The OpenBLAS kernel that runs this CPU's widest instructions, or None."""
    if "avx512f" in flags:
        return "Cooperlake" if vendor == "GenuineIntel" and "avx512_bf16" in flags else "SkylakeX"
    if "avx2" in flags:
        return "Zen" if vendor == "AuthenticAMD" else "Haswell"
    return None


def openblas():
    """Debian's OpenBLAS (torch's BLAS through libblas.so.3), or None."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib
    except (OSError, AttributeError):
        return None


def choose_openblas_core(lib):
    """Runs this script again with the fitting kernel when OpenBLAS picked a lower one on its own."""
    if lib is None or "OPENBLAS_CORETYPE" in os.environ or os.environ.get(CORE_AUTO_MARK) == "1":
        return
    picked = lib.openblas_get_corename().decode()
    fit = fitting_openblas_core(*cpu_facts())
    if fit and OPENBLAS_RANK.get(picked.lower(), 99) < OPENBLAS_RANK[fit.lower()]:
        os.environ["OPENBLAS_CORETYPE"] = fit
        os.environ[CORE_AUTO_MARK] = "1"
        os.execv(sys.executable, [sys.executable] + sys.argv)


def describe(torch_model):
    rows = []
    for name, p in torch_model.PRESETS.items():
        for ffn in torch_model.FFN_KINDS:
            cfg = torch_model.preset_config(name, ffn)
            rows.append(dict(preset=name, ffn=ffn, dim=cfg.dim, layers=cfg.layers, heads=cfg.heads,
                             kv_heads=cfg.kv_heads, hidden=cfg.hidden, vocab=cfg.vocab, seq=cfg.seq,
                             qk_norm=int(cfg.qk_norm), batch=p["batch"], params=torch_model.param_count(cfg)))
    print(json.dumps(rows))


def main(argv):
    a = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    lib = openblas()
    if not a.describe:
        choose_openblas_core(lib)

    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, HERE)
    import torch  # noqa: E402  (after the environment above: OpenMP reads it once)
    import torch_model as tm  # noqa: E402

    if a.describe:
        describe(tm)
        return
    if a.preset not in tm.PRESETS:
        sys.exit(f"torch_reference.py: --preset {a.preset!r} is none of {', '.join(tm.PRESETS)}")
    if a.ffn not in tm.FFN_KINDS:
        sys.exit(f"torch_reference.py: --ffn {a.ffn!r} is none of {', '.join(tm.FFN_KINDS)}")
    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if lib is not None:  # torch.set_num_threads does not reach OpenBLAS's own threads
        lib.openblas_set_num_threads(ctypes.c_int(a.threads))

    cfg = tm.preset_config(a.preset, a.ffn)
    if a.seq:
        cfg.seq = a.seq
    batch = a.batch or tm.PRESETS[a.preset]["batch"]
    torch.manual_seed(a.seed)
    params = tm.init_parameters(cfg)
    optimizer = tm.adamw(params, lr=5e-4)
    cos, sin = tm.rope_tables(cfg.seq, cfg.dim // cfg.heads, cfg.rope_theta)
    fused = tm.has_fused_attention()
    tokens_gen = torch.Generator().manual_seed(a.seed + 1)

    def step():
        stream = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=tokens_gen)
        x, y = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with tm.autocast(a.precision):
            loss = tm.loss_of(tm.forward(params, x, cfg, cos, sin, fused_attention=fused), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        optimizer.step()
        t3 = time.perf_counter()
        return loss.item(), (t3 - t0, t1 - t0, t2 - t1, t3 - t2)

    losses, times = [], []
    for s in range(a.warmup + a.steps):
        loss, t = step()
        losses.append(loss)
        if s >= a.warmup:
            times.append(t)
    med = [statistics.median(t[i] for t in times) for i in range(4)]
    mean_step = sum(t[0] for t in times) / len(times)
    tokens_per_step = batch * cfg.seq
    fpt = tm.flops_per_token(cfg)
    tps = tokens_per_step / med[0]
    result = dict(
        preset=a.preset, ffn=cfg.ffn, dim=cfg.dim, layers=cfg.layers, heads=cfg.heads, kv_heads=cfg.kv_heads,
        hidden=cfg.hidden, vocab=cfg.vocab, seq=cfg.seq, batch=batch, params=tm.param_count(cfg),
        precision=a.precision, threads=a.threads, steps=a.steps, warmup=a.warmup,
        flops_per_token=fpt, tokens_per_s=tps, tokens_per_s_mean=tokens_per_step / mean_step,
        ms_per_step=1e3 * med[0], ms_fwd=1e3 * med[1], ms_bwd=1e3 * med[2], ms_opt=1e3 * med[3],
        achieved_gflops=tps * fpt / 1e9,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        rss_after_import_torch_mb=rss_after_import, loss_first=losses[0], loss_last=losses[-1],
        attention="F.scaled_dot_product_attention" if fused else "softmax(q k^T / sqrt(hd) + mask) v",
        torch=torch.__version__, torch_threads=torch.get_num_threads(),
        openblas_core=lib.openblas_get_corename().decode() if lib is not None else None,
        openblas_core_auto=os.environ.get(CORE_AUTO_MARK) == "1",
        env={k: os.environ[k] for k in sorted(os.environ)
             if k.startswith(("OPENBLAS", "OMP_", "GOMP", "KMP", "ATEN", "DNNL"))},
    )
    if a.json:
        print(json.dumps(result))
        return
    print(f"PyTorch {result['torch']}: {a.preset} ({cfg.ffn}), {result['params']} parameters, batch {batch} x seq "
          f"{cfg.seq}, {a.threads} threads, {a.precision}; OpenBLAS {result['openblas_core']}"
          f"{' (chosen by this script)' if result['openblas_core_auto'] else ''}")
    print(f"tokens/s      {tps:10.0f}   (median step; mean step gives {result['tokens_per_s_mean']:.0f})")
    print(f"ms per step   {result['ms_per_step']:10.2f}   forward {result['ms_fwd']:.2f}, backward "
          f"{result['ms_bwd']:.2f}, optimizer {result['ms_opt']:.2f} (medians)")
    print(f"GFLOP/s       {result['achieved_gflops']:10.1f}   ({fpt} FLOPs/token = 6N + 12 L T dim)")
    print(f"peak RSS      {result['peak_rss_mb']:10.1f} MB ({rss_after_import:.0f} MB after importing torch)")
    print(f"loss          {losses[0]:10.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
