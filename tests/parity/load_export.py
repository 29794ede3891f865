#!/usr/bin/python3
"""Loads a `tapegrad ckpt export` file in PyTorch (tests/test_export.c runs it).

usage: /usr/bin/python3 tests/parity/load_export.py MODEL.safetensors   (`--safetensors` export)
       /usr/bin/python3 tests/parity/load_export.py DIR                 (`--hf DIR` export)

Reads config.json (beside the file: tapegrad's own keys; in DIR: the Hugging Face Llama or Qwen3
keys, hidden_size, num_hidden_layers, ..., and nothing else) and the safetensors file by hand (8-byte
little-endian header length, JSON header, data buffer; this torch has no `safetensors`
package), checks that it holds exactly the tensors of that config under the Llama/MiniMind names
with their shapes, then runs tapegrad's model in PyTorch (bench/torch_model.py) on a fixed
batch. Prints one line per tensor, "norm NAME L2", and "loss VALUE", for the C side to compare
with its own numbers.
"""
import json
import math
import os
import struct
import sys
import types

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_model  # noqa: E402  (the reference model: forward, loss_of, rope_tables)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} has dtype {entry['dtype']}, expected F32")
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32)
        tensors[name] = t.reshape(entry["shape"])
    return tensors, header.get("__metadata__", {})


def tapegrad_config(path):
    with open(os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")) as f:
        config = json.load(f)
    if config["ffn"] not in torch_model.FFN_KINDS or not config["tie_word_embeddings"]:
        sys.exit(f"the reference model has a SwiGLU or ReLU FFN and a tied head, not {config}")
    return types.SimpleNamespace(ffn=config["ffn"],
        dim=config["dim"], layers=config["n_layers"], heads=config["n_heads"], kv_heads=config["n_kv_heads"],
        hidden=config["hidden_dim"], vocab=config["vocab_size"], seq=config["max_seq_len"],
        rope_theta=config["rope_theta"], norm_eps=config["norm_eps"], qk_norm=config.get("qk_norm", False))


# The Hugging Face architectures read here: Llama, and Qwen3 (Llama's layers with an RMSNorm of
# head_dim over each query and key head, q_norm and k_norm, before RoPE: MiniMind-3's QK-norm).
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def llama_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    kind = config["model_type"]
    if (config["architectures"] != [ARCHITECTURES.get(kind)] or config["hidden_act"] != "silu"
            or not config["tie_word_embeddings"] or config.get("attention_bias") or config.get("mlp_bias")
            or config.get("use_sliding_window")):
        sys.exit(f"not a plain Llama or Qwen3 config with a tied head: {config}")
    cfg = types.SimpleNamespace(
        ffn="swiglu", dim=config["hidden_size"], layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
        kv_heads=config["num_key_value_heads"], hidden=config["intermediate_size"], vocab=config["vocab_size"],
        seq=config["max_position_embeddings"], rope_theta=config["rope_theta"], norm_eps=config["rms_norm_eps"],
        qk_norm=kind == "qwen3")
    if config.get("head_dim", cfg.dim // cfg.heads) != cfg.dim // cfg.heads:
        sys.exit("head_dim is not hidden_size / num_attention_heads")
    return cfg


def main(path):
    if os.path.isdir(path):
        cfg = llama_config(path)
        path = os.path.join(path, "model.safetensors")
    else:
        cfg = tapegrad_config(path)
    tensors, metadata = read_safetensors(path)
    expected = dict(torch_model.parameter_shapes(cfg))
    if set(tensors) != set(expected):
        sys.exit(f"names differ: missing {sorted(set(expected) - set(tensors))}, extra {sorted(set(tensors) - set(expected))}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != tuple(shape):
            sys.exit(f"{name}: shape {tuple(tensors[name].shape)}, config.json says {tuple(shape)}")
        if not torch.isfinite(tensors[name]).all():
            sys.exit(f"{name}: holds NaN or Inf")
        print(f"norm {name} {tensors[name].double().norm().item():.17g}")

    # the fixed batch the C side also uses: token (b * seq + t) * 7 % vocab
    batch = 2
    stream = torch.tensor([[(b * (cfg.seq + 1) + t) * 7 % cfg.vocab for t in range(cfg.seq + 1)]
                           for b in range(batch)], dtype=torch.int64)
    tokens, targets = stream[:, :-1], stream[:, 1:]
    cos, sin = torch_model.rope_tables(cfg.seq, cfg.dim // cfg.heads, cfg.rope_theta)
    with torch.no_grad():
        loss = torch_model.loss_of(torch_model.forward(tensors, tokens, cfg, cos, sin), targets)
    print(f"loss {loss.item():.9g}")
    print(f"metadata format={metadata.get('format')} tensors={len(tensors)} ln_vocab={math.log(cfg.vocab):.4f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    main(sys.argv[1])
