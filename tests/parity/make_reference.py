#!/usr/bin/python3
"""Whole-model PyTorch reference for tapegrad's parity test (tests/test_parity.c).

Takes tapegrad's transformer in plain PyTorch (bench/torch_model.py, the model the benchmark
runs too), runs the forward on a fixed batch and five training steps the way tapegrad's trainer
runs them (micro-batches of gradient accumulation, global-norm clipping, AdamW with the warmup
+ cosine learning rate), and writes everything the C side must reproduce into ONE safetensors
file: the initial weights, the batch, the logits, the gradient of the first step, every step's
loss and gradient norm, and the weights and AdamW moments after the last step
(tests/parity/README.md lists them).

usage: /usr/bin/python3 tests/parity/make_reference.py OUT.safetensors [--dim 64] [--layers 2] ...

The safetensors format is written by hand (this torch has no `safetensors` package):
8-byte little-endian header length, JSON header, data buffer.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_model as tm  # noqa: E402  (the model: bench/torch_model.py)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("output", help="path of the .safetensors file to write")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=67)
    p.add_argument("--hidden", type=int, default=0,
                   help="FFN hidden size; 0: 64*ceil((8*dim/3)/64) for SwiGLU, as MiniMind; 4*dim for ReLU")
    p.add_argument("--ffn", choices=list(tm.FFN_KINDS), default="swiglu")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=3, help="rows of one micro-batch")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per step, as tapegrad train --accum (each backward of loss/accum)")
    p.add_argument("--ignore", type=int, default=0,
                   help="this many targets (drawn at random) set to the ignore index -1")
    p.add_argument("--steps", type=int, default=5, help="training steps (clip + AdamW)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rope-theta", type=float, default=1e6)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--qk-norm", action="store_true", help="QK-norm: an RMSNorm over each query and key head")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the end of the cosine")
    p.add_argument("--warmup", type=int, default=2, help="linear warmup steps")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--dpo-beta", type=float, default=0,
                   help="DPO: each micro-batch is P = batch/2 pairs (rows p and P + p share a prompt, whose "
                        "targets are ignored), its loss DPO's with this beta against the initial weights' "
                        "log-probabilities shifted at random (so that margins start away from 0)")
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16), as "
                        "bench/torch_reference.py --precision bf16 runs them; weights, gradients and "
                        "AdamW stay float32")
    a = p.parse_args(argv)
    try:
        model = tm.config(a.dim, a.layers, a.heads, a.kv_heads, a.vocab, a.seq, hidden=a.hidden, ffn=a.ffn,
                          rope_theta=a.rope_theta, norm_eps=a.norm_eps, qk_norm=a.qk_norm)
    except ValueError as e:
        p.error(str(e))
    a.hidden = model.hidden
    if a.dpo_beta and (a.batch % 2 or a.ignore or a.seq < 4):
        p.error("DPO needs an even batch, no --ignore (the prompts are), and seq >= 4")
    if a.accum < 1 or not 0 <= a.ignore < a.batch * a.seq:
        p.error("need accum >= 1 and fewer ignored targets than one micro-batch holds")
    return a


# ---- safetensors, by hand ----

# torch dtype -> (safetensors dtype, little-endian numpy dtype)
DTYPES = {torch.float32: ("F32", "<f4"), torch.int32: ("I32", "<i4")}


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor) in file order; metadata: dict str -> str."""
    header = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, t in tensors:
        t = t.detach().contiguous()
        dtype, little_endian = DTYPES[t.dtype]
        raw = t.numpy().astype(little_endian, copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # spaces allowed; data buffer starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def autocast(cfg):
    return tm.autocast("bf16" if cfg.autocast == "bf16" else "fp32")


def tg_lr_at(cfg, step):
    return tm.lr_at(cfg.lr, cfg.min_lr, cfg.warmup, cfg.steps, step)


def micro_loss(logits, targets, cfg, ref):
    """The loss of one micro-batch: cross-entropy, or DPO against ref (its 2P rows')."""
    if cfg.dpo_beta:
        return tm.dpo_loss(logits, targets, ref, cfg.dpo_beta)[0]
    return tm.loss_of(logits, targets)


def dpo_batch(tokens, targets, cfg):
    """Makes each micro-batch P pairs: row P + p takes row p's prompt (its first k tokens, k drawn
    in [1, seq/2]), and the prompt's targets are ignored on both rows."""
    pairs = cfg.batch // 2
    for micro in range(cfg.accum):
        for p in range(pairs):
            c, r = micro * cfg.batch + p, micro * cfg.batch + pairs + p
            k = int(torch.randint(1, cfg.seq // 2 + 1, (1,)))
            tokens[r, :k] = tokens[c, :k]
            targets[c, :k - 1] = tm.IGNORE_INDEX
            targets[r, :k - 1] = tm.IGNORE_INDEX


def train_step(params, optimizer, tokens, targets, cfg, cos, sin, step, ref=None):
    """One step as train/trainer.c runs it: zero the gradients; per micro-batch the loss and the
    backward of loss/accum; clip the global norm; AdamW at tg_lr_at(step). Returns the mean loss
    of the micro-batches, and the gradient norm and the gradients before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for micro in range(cfg.accum):
        rows = slice(micro * cfg.batch, (micro + 1) * cfg.batch)
        with autocast(cfg):
            loss = micro_loss(tm.forward(params, tokens[rows], cfg, cos, sin), targets[rows], cfg,
                              ref[rows] if ref is not None else None)
        loss_sum += loss.item()
        (loss / cfg.accum if cfg.accum > 1 else loss).backward()
    grads = [("grad." + name, p.grad.detach().clone()) for name, p in params.items()]
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), cfg.clip)
    for group in optimizer.param_groups:
        group["lr"] = tg_lr_at(cfg, step)
    optimizer.step()
    return loss_sum / cfg.accum, norm.item(), grads


def main(argv):
    cfg = parse_args(argv)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    params = tm.init_parameters(cfg)
    # inputs and targets: one random (accum*B, T+1) stream, targets = the next token of each
    # input; micro-batch i is rows [i*B, (i+1)*B)
    stream = torch.randint(0, cfg.vocab, (cfg.accum * cfg.batch, cfg.seq + 1), dtype=torch.int64)
    tokens, targets = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
    if cfg.ignore:
        targets.view(-1)[torch.randperm(targets.numel())[:cfg.ignore]] = tm.IGNORE_INDEX
    if cfg.dpo_beta:
        dpo_batch(tokens, targets, cfg)
    cos, sin = tm.rope_tables(cfg.seq, cfg.dim // cfg.heads, cfg.rope_theta)

    # the initial weights, saved before any update, and the logits they give
    initial = [(name, p.detach().clone()) for name, p in params.items()]
    with torch.no_grad(), autocast(cfg):
        logits = tm.forward(params, tokens, cfg, cos, sin).float()

    ref = None
    if cfg.dpo_beta:  # the reference: the initial weights' log-probabilities, shifted
        with torch.no_grad():
            ref = tm.sequence_logprobs(logits, targets) + torch.randn(logits.shape[0])
            # each micro-batch's mean reward margin under the initial weights (the first step's)
            rows = [slice(i * cfg.batch, (i + 1) * cfg.batch) for i in range(cfg.accum)]
            margins = torch.stack([tm.dpo_loss(logits[r], targets[r], ref[r], cfg.dpo_beta)[1].mean() for r in rows])
    optimizer = tm.adamw(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
    step_losses, grad_norms = [], []
    for step in range(cfg.steps):
        loss, norm, step_grads = train_step(params, optimizer, tokens, targets, cfg, cos, sin, step, ref)
        step_losses.append(loss)
        grad_norms.append(norm)
        if step == 0:
            grads = step_grads  # the first step's gradients, before clipping
    final = [("final." + name, p.detach().clone()) for name, p in params.items()]
    moments = [("adamw_m." + name, optimizer.state[p]["exp_avg"]) for name, p in params.items()]
    moments += [("adamw_v." + name, optimizer.state[p]["exp_avg_sq"]) for name, p in params.items()]

    metadata = {
        "format": "tapegrad-parity-reference",
        "dim": str(cfg.dim), "layers": str(cfg.layers), "heads": str(cfg.heads),
        "kv_heads": str(cfg.kv_heads), "head_dim": str(cfg.dim // cfg.heads), "hidden": str(cfg.hidden),
        "ffn": cfg.ffn,
        "vocab": str(cfg.vocab), "seq": str(cfg.seq), "batch": str(cfg.batch), "accum": str(cfg.accum),
        "ignored": str(int((targets == tm.IGNORE_INDEX).sum())),
        "rope_theta": repr(cfg.rope_theta), "norm_eps": repr(cfg.norm_eps), "qk_norm": str(int(cfg.qk_norm)),
        "lr": repr(cfg.lr), "min_lr": repr(cfg.min_lr), "warmup": str(cfg.warmup),
        "lrs": ",".join(repr(tg_lr_at(cfg, s)) for s in range(cfg.steps)),
        "betas": f"{cfg.beta1!r},{cfg.beta2!r}", "eps": repr(cfg.eps),
        "weight_decay": repr(cfg.weight_decay), "clip": repr(cfg.clip), "steps": str(cfg.steps),
        "seed": str(cfg.seed), "torch_version": torch.__version__, "autocast": cfg.autocast,
    }
    if cfg.dpo_beta:
        metadata["dpo_beta"] = repr(cfg.dpo_beta)
    entries = initial + [
        ("tokens", tokens.to(torch.int32)),
        ("targets", targets.to(torch.int32)),
        ("logits", logits),
        ("loss", torch.tensor(step_losses[0], dtype=torch.float32)),
    ] + ([("dpo_ref", ref.float()), ("dpo_margins", margins.float())] if cfg.dpo_beta else []) + grads + [
        ("adamw_losses", torch.tensor(step_losses, dtype=torch.float32)),
        ("grad_norms", torch.tensor(grad_norms, dtype=torch.float32)),
    ] + final + moments
    write_safetensors(cfg.output, entries, metadata)
    print(f"wrote {cfg.output}: loss {step_losses[0]:.6f} (ln vocab {math.log(cfg.vocab):.6f}), "
          f"step losses {' '.join(f'{x:.6f}' for x in step_losses)}, "
          f"gradient norms {' '.join(f'{x:.4f}' for x in grad_norms)} (clip {cfg.clip})")


if __name__ == "__main__":
    main(sys.argv[1:])
