#!/usr/bin/python3
"""Whole-model PyTorch reference for tapegrad's parity test (tests/test_parity.c).

Builds the MiniMind-style transformer of DESIGN.md section 3 in plain PyTorch, runs the
forward on a fixed batch and five training steps the way tapegrad's trainer runs them (micro-
batches of gradient accumulation, global-norm clipping, AdamW with the warmup + cosine learning
rate), and writes everything the C side must reproduce into ONE safetensors file: the initial
weights, the batch, the logits, the gradient of the first step, every step's loss and gradient
norm, and the weights and AdamW moments after the last step (tests/parity/README.md lists them).

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
import torch.nn.functional as F


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("output", help="path of the .safetensors file to write")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=67)
    p.add_argument("--hidden", type=int, default=0,
                   help="SwiGLU hidden size; 0 means 64*ceil((8*dim/3)/64), as MiniMind")
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
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4, help="learning rate at the end of the cosine")
    p.add_argument("--warmup", type=int, default=2, help="linear warmup steps")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16), as "
                        "../shared/bench/torch_minimind.py --autocast bf16 runs them; weights, gradients "
                        "and AdamW stay float32")
    a = p.parse_args(argv)
    if a.hidden == 0:
        a.hidden = 64 * math.ceil((8 * a.dim / 3) / 64)
    if a.dim % a.heads or a.heads % a.kv_heads or (a.dim // a.heads) % 2:
        p.error("need dim divisible by heads, heads by kv-heads, and an even head_dim")
    if a.accum < 1 or not 0 <= a.ignore < a.batch * a.seq:
        p.error("need accum >= 1 and fewer ignored targets than one micro-batch holds")
    return a


# ---- the model: weights in a dict under the Llama/MiniMind names ----

def parameter_shapes(cfg):
    """(name, shape) in a fixed order; the order also fixes the random init."""
    hd = cfg.dim // cfg.heads
    shapes = [("model.embed_tokens.weight", (cfg.vocab, cfg.dim))]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (cfg.dim,)),
            (p + "self_attn.q_proj.weight", (cfg.heads * hd, cfg.dim)),
            (p + "self_attn.k_proj.weight", (cfg.kv_heads * hd, cfg.dim)),
            (p + "self_attn.v_proj.weight", (cfg.kv_heads * hd, cfg.dim)),
            (p + "self_attn.o_proj.weight", (cfg.dim, cfg.heads * hd)),
            (p + "post_attention_layernorm.weight", (cfg.dim,)),
            (p + "mlp.gate_proj.weight", (cfg.hidden, cfg.dim)),  # w1
            (p + "mlp.up_proj.weight", (cfg.hidden, cfg.dim)),    # w3
            (p + "mlp.down_proj.weight", (cfg.dim, cfg.hidden)),  # w2
        ]
    shapes.append(("model.norm.weight", (cfg.dim,)))
    return shapes


def init_parameters(cfg):
    params = {}
    for name, shape in parameter_shapes(cfg):
        if len(shape) == 1:  # RMSNorm gains start at 1
            params[name] = torch.ones(shape, dtype=torch.float32)
        else:                # linear and embedding weights ~ N(0, 0.02)
            params[name] = torch.empty(shape, dtype=torch.float32).normal_(0.0, 0.02)
        params[name].requires_grad_(True)
    return params


def rmsnorm(x, gain, eps):
    # y = x / sqrt(mean(x^2) + eps) * g
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def rope_tables(seq, head_dim, theta):
    # inv_freq_i = theta^(-2i/d), angle = position * inv_freq; computed in float64, then rounded
    # once to float32, so the reference carries no float32 error of its own in the angles
    i = torch.arange(0, head_dim // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)  # (T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)                             # (T, hd): pairs (i, i+hd/2)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    # rotate_half([a, b, c, d]) = [-c, -d, a, b]
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def attention(x, params, prefix, cfg, cos, sin):
    B, T, _ = x.shape
    hd = cfg.dim // cfg.heads
    q = (x @ params[prefix + "q_proj.weight"].T).view(B, T, cfg.heads, hd)
    k = (x @ params[prefix + "k_proj.weight"].T).view(B, T, cfg.kv_heads, hd)
    v = (x @ params[prefix + "v_proj.weight"].T).view(B, T, cfg.kv_heads, hd)
    c, s = cos.view(1, T, 1, hd), sin.view(1, T, 1, hd)  # after the head split, per head
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    # GQA: query head h reads KV head h // (heads / kv_heads)
    group = cfg.heads // cfg.kv_heads
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # (B, H, T, T)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, hd)
    out = out.transpose(1, 2).reshape(B, T, cfg.heads * hd)
    return out @ params[prefix + "o_proj.weight"].T


def feed_forward(x, params, prefix):
    # w2(silu(w1 x) * w3 x) with w1 = gate, w3 = up, w2 = down
    gate = x @ params[prefix + "gate_proj.weight"].T
    up = x @ params[prefix + "up_proj.weight"].T
    return (F.silu(gate) * up) @ params[prefix + "down_proj.weight"].T


def forward(params, tokens, cfg, cos, sin):
    embed = params["model.embed_tokens.weight"]
    h = embed[tokens]  # (B, T, dim)
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        h = h + attention(rmsnorm(h, params[p + "input_layernorm.weight"], cfg.norm_eps),
                          params, p + "self_attn.", cfg, cos, sin)
        h = h + feed_forward(rmsnorm(h, params[p + "post_attention_layernorm.weight"], cfg.norm_eps),
                             params, p + "mlp.")
    h = rmsnorm(h, params["model.norm.weight"], cfg.norm_eps)
    return h @ embed.T  # tied output head: (B, T, vocab)


IGNORE_INDEX = -1  # tapegrad's TG_IGNORE_INDEX


def loss_of(logits, targets):
    # mean over the targets that are not ignored
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def tg_lr_at(cfg, step):
    """train/optim.c tg_lr_at with total = cfg.steps: linear warmup, then cosine to min_lr."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if step >= cfg.steps:
        return cfg.min_lr
    span = cfg.steps - cfg.warmup
    progress = (step - cfg.warmup) / span if span > 0 else 1.0
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


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
    """PyTorch's mixed precision on the CPU, or nothing: its matrix products take bf16 operands
    (and give bf16 results, which the ops after them then take)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast == "bf16")


def train_step(params, optimizer, tokens, targets, cfg, cos, sin, step):
    """One step as train/trainer.c runs it: zero the gradients; per micro-batch the loss and the
    backward of loss/accum; clip the global norm; AdamW at tg_lr_at(step). Returns the mean loss
    of the micro-batches, and the gradient norm and the gradients before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for micro in range(cfg.accum):
        rows = slice(micro * cfg.batch, (micro + 1) * cfg.batch)
        with autocast(cfg):
            loss = loss_of(forward(params, tokens[rows], cfg, cos, sin), targets[rows])
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

    params = init_parameters(cfg)
    # inputs and targets: one random (accum*B, T+1) stream, targets = the next token of each
    # input; micro-batch i is rows [i*B, (i+1)*B)
    stream = torch.randint(0, cfg.vocab, (cfg.accum * cfg.batch, cfg.seq + 1), dtype=torch.int64)
    tokens, targets = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
    if cfg.ignore:
        targets.view(-1)[torch.randperm(targets.numel())[:cfg.ignore]] = IGNORE_INDEX
    cos, sin = rope_tables(cfg.seq, cfg.dim // cfg.heads, cfg.rope_theta)

    # the initial weights, saved before any update, and the logits they give
    initial = [(name, p.detach().clone()) for name, p in params.items()]
    with torch.no_grad(), autocast(cfg):
        logits = forward(params, tokens, cfg, cos, sin).float()

    decay = [p for p in params.values() if p.dim() == 2]     # embedding and linear weights
    no_decay = [p for p in params.values() if p.dim() != 2]  # RMSNorm gains
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    step_losses, grad_norms = [], []
    for step in range(cfg.steps):
        loss, norm, step_grads = train_step(params, optimizer, tokens, targets, cfg, cos, sin, step)
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
        "vocab": str(cfg.vocab), "seq": str(cfg.seq), "batch": str(cfg.batch), "accum": str(cfg.accum),
        "ignored": str(cfg.ignore),
        "rope_theta": repr(cfg.rope_theta), "norm_eps": repr(cfg.norm_eps),
        "lr": repr(cfg.lr), "min_lr": repr(cfg.min_lr), "warmup": str(cfg.warmup),
        "lrs": ",".join(repr(tg_lr_at(cfg, s)) for s in range(cfg.steps)),
        "betas": f"{cfg.beta1!r},{cfg.beta2!r}", "eps": repr(cfg.eps),
        "weight_decay": repr(cfg.weight_decay), "clip": repr(cfg.clip), "steps": str(cfg.steps),
        "seed": str(cfg.seed), "torch_version": torch.__version__, "autocast": cfg.autocast,
    }
    entries = initial + [
        ("tokens", tokens.to(torch.int32)),
        ("targets", targets.to(torch.int32)),
        ("logits", logits),
        ("loss", torch.tensor(step_losses[0], dtype=torch.float32)),
    ] + grads + [
        ("adamw_losses", torch.tensor(step_losses, dtype=torch.float32)),
        ("grad_norms", torch.tensor(grad_norms, dtype=torch.float32)),
    ] + final + moments
    write_safetensors(cfg.output, entries, metadata)
    print(f"wrote {cfg.output}: loss {step_losses[0]:.6f} (ln vocab {math.log(cfg.vocab):.6f}), "
          f"step losses {' '.join(f'{x:.6f}' for x in step_losses)}, "
          f"gradient norms {' '.join(f'{x:.4f}' for x in grad_norms)} (clip {cfg.clip})")


if __name__ == "__main__":
    main(sys.argv[1:])
