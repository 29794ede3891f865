"""tapegrad's transformer in plain PyTorch: the one model definition every comparison uses.

The model of model/model.c, written op by op so that each line can be held against its C op:
the token embedding, tied with the output head; per layer RMSNorm -> causal attention with RoPE
(half-split pairs (i, i + hd/2), theta 1e6; with qk_norm, an RMSNorm over each query and key head
before it, MiniMind-3's QK-norm) and grouped KV heads -> residual, then RMSNorm ->
FFN -> residual; a final RMSNorm; no biases. The FFN is SwiGLU, w2(silu(w1 x) * w3 x), or ReLU,
w2(relu(w1 x)). The weights are a dict under the Llama names that tapegrad's checkpoints and
exports use, created in one fixed order (which also fixes the random init).

Who uses it: bench/torch_reference.py (throughput, beside `tapegrad bench`),
tests/parity/make_reference.py (the whole-model parity test) and tests/parity/load_export.py
(exports read back). It imports torch, so set the thread and BLAS environment before importing it.
"""
import math
import types

import torch
import torch.nn.functional as F

# tapegrad's presets (TG_MODEL_PRESETS, include/tapegrad/model.h), with the batch and vocabulary
# `tapegrad bench` runs each at (cli/cmd_bench.c: a char tokenizer's where the preset has none).
# tests/test_parity.c holds this table to the program's.
PRESETS = {
    "tiny": dict(dim=64, layers=2, heads=2, kv_heads=2, hidden=176, seq=32, vocab=64, batch=4),
    "small": dict(dim=128, layers=8, heads=4, kv_heads=4, hidden=352, seq=128, vocab=96, batch=16),
    "minimind-26m": dict(dim=512, layers=8, heads=8, kv_heads=2, hidden=1408, seq=256, vocab=6400, batch=8),
    "minimind-3": dict(dim=768, layers=8, heads=8, kv_heads=4, hidden=2432, seq=512, vocab=6400, batch=8,
                       qk_norm=True, norm_eps=1e-6),
}
FFN_KINDS = ("swiglu", "relu")
IGNORE_INDEX = -1  # tapegrad's TG_IGNORE_INDEX


def swiglu_hidden(dim):
    """tg_model_swiglu_hidden: 64 * ceil((8 dim / 3) / 64), as MiniMind sizes it."""
    return 64 * math.ceil((8 * dim / 3) / 64)


def ffn_hidden(ffn, dim):
    """tg_model_ffn_hidden: ReLU's 4 dim gives the parameters of SwiGLU's 3 x (8/3) dim."""
    return 4 * dim if ffn == "relu" else swiglu_hidden(dim)


def config(dim, layers, heads, kv_heads, vocab, seq, hidden=0, ffn="swiglu", rope_theta=1e6, norm_eps=1e-5,
           qk_norm=False):
    """A model config; hidden 0 takes ffn_hidden's. Raises ValueError on shapes attention cannot
    take."""
    if ffn not in FFN_KINDS:
        raise ValueError(f"ffn must be one of {', '.join(FFN_KINDS)}, got {ffn!r}")
    if dim % heads or heads % kv_heads or (dim // heads) % 2:
        raise ValueError(f"dim {dim}, heads {heads}, kv heads {kv_heads}: need dim divisible by heads, "
                         "heads by kv heads, and an even head size")
    return types.SimpleNamespace(dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, seq=seq,
                                 hidden=hidden or ffn_hidden(ffn, dim), ffn=ffn, rope_theta=rope_theta,
                                 norm_eps=norm_eps, qk_norm=qk_norm)


def preset_config(name, ffn="swiglu"):
    """The config of one of PRESETS, as `tapegrad bench --preset NAME --ffn FFN` builds it."""
    p = PRESETS[name]
    return config(p["dim"], p["layers"], p["heads"], p["kv_heads"], p["vocab"], p["seq"],
                  hidden=p["hidden"] if ffn == "swiglu" else 0, ffn=ffn, norm_eps=p.get("norm_eps", 1e-5),
                  qk_norm=p.get("qk_norm", False))


def parameter_shapes(cfg):
    """(name, shape) of every weight, in the order model/model.c adds them."""
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
        ]
        if getattr(cfg, "qk_norm", False):  # one gain of head_dim each, shared by the heads
            shapes += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        shapes += [
            (p + "post_attention_layernorm.weight", (cfg.dim,)),
            (p + "mlp.gate_proj.weight", (cfg.hidden, cfg.dim)),  # w1
        ]
        if getattr(cfg, "ffn", "swiglu") == "swiglu":
            shapes.append((p + "mlp.up_proj.weight", (cfg.hidden, cfg.dim)))  # w3
        shapes.append((p + "mlp.down_proj.weight", (cfg.dim, cfg.hidden)))  # w2
    shapes.append(("model.norm.weight", (cfg.dim,)))
    return shapes


def param_count(cfg):
    """Parameters, the tied embedding counted once (tg_model_config_param_count)."""
    return sum(math.prod(shape) for _, shape in parameter_shapes(cfg))


def init_parameters(cfg):
    """Every weight, requiring its gradient: matrices ~ N(0, 0.02), RMSNorm gains 1, drawn in
    parameter_shapes' order from torch's generator (seed it first)."""
    params = {}
    for name, shape in parameter_shapes(cfg):
        if len(shape) == 1:
            params[name] = torch.ones(shape, dtype=torch.float32)
        else:
            params[name] = torch.empty(shape, dtype=torch.float32).normal_(0.0, 0.02)
        params[name].requires_grad_(True)
    return params


def rmsnorm(x, gain, eps):
    # y = x / sqrt(mean(x^2) + eps) * g
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def rope_tables(seq, head_dim, theta):
    # angle = position * theta^(-2i/hd), computed in float64 and rounded once to float32, as
    # tg_rope_table_init does, so the tables carry no float32 error of their own
    i = torch.arange(0, head_dim // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)  # (T, hd/2)
    angles = torch.cat([angles, angles], dim=-1)                             # (T, hd): pairs (i, i+hd/2)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    # rotate_half([a, b, c, d]) = [-c, -d, a, b]
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def attention(x, params, prefix, cfg, cos, sin, fused):
    B, T, _ = x.shape
    hd = cfg.dim // cfg.heads
    q = (x @ params[prefix + "q_proj.weight"].T).view(B, T, cfg.heads, hd)
    k = (x @ params[prefix + "k_proj.weight"].T).view(B, T, cfg.kv_heads, hd)
    v = (x @ params[prefix + "v_proj.weight"].T).view(B, T, cfg.kv_heads, hd)
    if getattr(cfg, "qk_norm", False):  # QK-norm: RMSNorm over each head, after the split, before RoPE
        q = rmsnorm(q, params[prefix + "q_norm.weight"], cfg.norm_eps)
        k = rmsnorm(k, params[prefix + "k_norm.weight"], cfg.norm_eps)
    c, s = cos[:T].view(1, T, 1, hd), sin[:T].view(1, T, 1, hd)  # after the head split, per head
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    # GQA: query head h reads KV head h // (heads / kv_heads)
    group = cfg.heads // cfg.kv_heads
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
    if fused:  # the same softmax(q k^T / sqrt(hd) + causal mask) v, in one kernel
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # (B, H, T, T)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        out = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v
    out = out.transpose(1, 2).reshape(B, T, cfg.heads * hd)
    return out @ params[prefix + "o_proj.weight"].T


def feed_forward(x, params, prefix, cfg):
    # SwiGLU w2(silu(w1 x) * w3 x), ReLU w2(relu(w1 x)); w1 = gate, w3 = up, w2 = down
    gate = x @ params[prefix + "gate_proj.weight"].T
    if getattr(cfg, "ffn", "swiglu") == "relu":
        hidden = F.relu(gate)
    else:
        hidden = F.silu(gate) * (x @ params[prefix + "up_proj.weight"].T)
    return hidden @ params[prefix + "down_proj.weight"].T


def has_fused_attention():
    """Whether this torch has F.scaled_dot_product_attention (torch 2.0 and later)."""
    return hasattr(F, "scaled_dot_product_attention")


def forward(params, tokens, cfg, cos, sin, fused_attention=False):
    """Logits (B, T, vocab) of tokens (B, T). fused_attention: F.scaled_dot_product_attention
    in place of the written-out softmax (the same function; the benchmark takes it where torch
    has it, the parity test never)."""
    embed = params["model.embed_tokens.weight"]
    h = embed[tokens]  # (B, T, dim)
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        h = h + attention(rmsnorm(h, params[p + "input_layernorm.weight"], cfg.norm_eps),
                          params, p + "self_attn.", cfg, cos, sin, fused_attention)
        h = h + feed_forward(rmsnorm(h, params[p + "post_attention_layernorm.weight"], cfg.norm_eps),
                             params, p + "mlp.", cfg)
    h = rmsnorm(h, params["model.norm.weight"], cfg.norm_eps)
    return h @ embed.T  # the tied output head


def loss_of(logits, targets):
    """Mean cross-entropy over the targets that are not IGNORE_INDEX."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def sequence_logprobs(logits, targets):
    """Each row's sum of log-probabilities of its targets that are not IGNORE_INDEX (B,)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    counted = targets != IGNORE_INDEX
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * counted).sum(dim=-1)


def dpo_loss(logits, targets, ref, beta):
    """DPO over P pairs, rows p (chosen) and P + p (rejected): the mean over pairs of
    -log sigmoid(beta ((c - ref_c) - (r - ref_r))), and the margins."""
    s = sequence_logprobs(logits, targets)
    pairs = s.shape[0] // 2
    margins = beta * ((s[:pairs] - ref[:pairs]) - (s[pairs:] - ref[pairs:]))
    return -F.logsigmoid(margins).mean(), margins


def adamw(params, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    """torch's AdamW as tapegrad's trainer applies it: weight decay on the matrices (embedding
    included), none on the RMSNorm gains."""
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)


def autocast(precision):
    """PyTorch's CPU mixed precision for "bf16" (its matrix products take bf16 operands and give
    bf16 results, which the ops after them then take), nothing for "fp32"."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def lr_at(lr, min_lr, warmup, total, step):
    """tg_lr_at (lib/optim.c): linear warmup over `warmup` steps, then cosine to min_lr at total."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    span = total - warmup
    progress = (step - warmup) / span if span > 0 else 1.0
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def flops_per_token(cfg):
    """Model FLOPs of one trained token, forward and backward, as `tapegrad bench` counts them:
    6 N (each weight in one product; the tied embedding once) + 12 L T dim (q k^T and the
    weighted sum of v, 4 T dim per layer forward, times 3 with the backward; the causal mask not
    discounted)."""
    return 6 * param_count(cfg) + 12 * cfg.layers * cfg.seq * cfg.dim
