#!/usr/bin/python3
"""Independent NumPy reference for kvd's worker: a Llama forward pass from a GGUF file.

Written from the architecture's definition (Llama 2/3: RMSNorm, rotary position
embeddings, grouped-query causal attention, SwiGLU feed-forward), NOT from kvd's C code.
It parses GGUF itself (pure Python + NumPy), computes in float64 with a full causal
mask over the whole sequence (no KV cache, no pages), so it shares nothing with the C
path but the file.

Rotary layout: GGUF llama files (llama.cpp's converter) permute the Q/K weight rows so
that each head's rotary pairs are ADJACENT elements (x[2i], x[2i+1]), rotated by angle
pos * inv_freq[i], inv_freq[i] = base^(-2i/head_dim) (rounded to float32, as the file
format's consumers compute it), with llama3 / linear scaling or rope_freqs.weight.

Usage:
  llama_ref.py rope-scaling SRC DST llama3 FACTOR LOW HIGH ORIG_CTX | linear FACTOR
                                           copy of SRC with rope scaling metadata set
  llama_ref.py logits MODEL OUT TOKENS     TOKENS "1,2,3"; writes (n, vocab) float32 LE
  llama_ref.py greedy MODEL TEXT N         BOS + SentencePiece encoding of TEXT, then N
                                           greedy tokens; prints 3 lines: prompt ids,
                                           generated ids, generated text
"""
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
# metadata value types (GGUF spec)
VT_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
VT_STRING, VT_ARRAY = 8, 9
# tensor types (ggml numbering) this reference reads
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30


class Reader:
    def __init__(self, buf):
        self.buf, self.off = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.off)[0]
        self.off += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.buf[self.off:self.off + n])
        self.off += n
        return s

    def value(self, vt):
        if vt == VT_STRING:
            return self.string()
        if vt == VT_ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(VT_FMT[vt])


def read_gguf(path):
    buf = memoryview(open(path, "rb").read())
    r = Reader(buf)
    assert bytes(buf[:4]) == GGUF_MAGIC, "not a GGUF file"
    r.off = 4
    version = r.take("<I")
    assert version in (2, 3), "GGUF version %d" % version
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string().decode()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string().decode()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        infos.append((name, ne, r.take("<I"), r.take("<Q")))
    align = meta.get("general.alignment", 32)
    data = (r.off + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        n = int(np.prod(ne))
        start = data + off
        if typ == T_F32:
            a = np.frombuffer(buf, np.float32, n, start).astype(np.float64)
        elif typ == T_F16:
            a = np.frombuffer(buf, np.float16, n, start).astype(np.float64)
        elif typ == T_BF16:
            u = np.frombuffer(buf, np.uint16, n, start).astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        elif typ == T_Q8_0:  # blocks of 32: f16 scale d, 32 int8 q; x = d * q
            nb = n // 32
            blk = np.frombuffer(buf, np.uint8, nb * 34, start).reshape(nb, 34)
            d = blk[:, :2].copy().view(np.float16).astype(np.float64)
            q = blk[:, 2:].copy().view(np.int8).astype(np.float64)
            a = (d * q).reshape(n)
        else:
            raise SystemExit("tensor %s: type %d not supported by the reference" % (name, typ))
        # ggml ne[0] is the innermost dimension: numpy shape is reversed
        tensors[name] = a.reshape(list(reversed(ne)))
    return meta, tensors


class Llama:
    def __init__(self, path):
        meta, t = read_gguf(path)
        arch = meta["general.architecture"].decode()
        assert arch == "llama", arch
        p = "llama."
        self.dim = meta[p + "embedding_length"]
        self.n_layers = meta[p + "block_count"]
        self.n_heads = meta[p + "attention.head_count"]
        self.n_kv = meta.get(p + "attention.head_count_kv", self.n_heads)
        self.hd = meta.get(p + "attention.key_length", self.dim // self.n_heads)
        self.eps = float(np.float32(meta.get(p + "attention.layer_norm_rms_epsilon", 1e-5)))
        base = meta.get(p + "rope.freq_base", 10000.0)
        i = np.arange(0, self.hd, 2, dtype=np.float64)
        inv = 1.0 / (base ** (i / self.hd))
        if "rope_freqs.weight" in t:
            inv = inv / t["rope_freqs.weight"]
        else:
            kind = meta.get(p + "rope.scaling.type", b"none").decode()
            factor = meta.get(p + "rope.scaling.factor", 1.0)
            if kind == "linear":
                inv = inv / factor
            elif kind == "llama3":  # Meta's reference apply_scaling()
                lo = meta.get(p + "rope.scaling.low_freq_factor", 1.0)
                hi = meta.get(p + "rope.scaling.high_freq_factor", 4.0)
                old = meta.get(p + "rope.scaling.original_context_length", 8192)
                wavelen = 2 * np.pi / inv
                smooth = (old / wavelen - lo) / (hi - lo)
                mid = (1 - smooth) * inv / factor + smooth * inv
                inv = np.where(wavelen < old / hi, inv,
                               np.where(wavelen > old / lo, inv / factor, mid))
        self.inv_freq = inv.astype(np.float32).astype(np.float64)
        self.t = t
        self.emb = t["token_embd.weight"]  # (vocab, dim)
        self.out = t.get("output.weight", self.emb)
        self.vocab = self.emb.shape[0]
        self.meta = meta

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # x: (n, heads, hd); rotate adjacent pairs (x[2i], x[2i+1]) by pos * inv_freq[i]
        ang = pos[:, None] * self.inv_freq[None, :]  # (n, hd/2)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = a * c - b * s
        y[..., 1::2] = a * s + b * c
        return y

    def logits(self, tokens):
        n = len(tokens)
        pos = np.arange(n, dtype=np.float64)
        x = self.emb[np.array(tokens)]
        mask = np.triu(np.full((n, n), -np.inf), 1)
        group = self.n_heads // self.n_kv
        for l in range(self.n_layers):
            w = lambda s: self.t["blk.%d.%s.weight" % (l, s)]
            h = self.rmsnorm(x, w("attn_norm"))
            q = (h @ w("attn_q").T).reshape(n, self.n_heads, self.hd)
            k = (h @ w("attn_k").T).reshape(n, self.n_kv, self.hd)
            v = (h @ w("attn_v").T).reshape(n, self.n_kv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            att = np.empty((n, self.n_heads, self.hd))
            for hq in range(self.n_heads):
                kh = hq // group
                sc = q[:, hq, :] @ k[:, kh, :].T / np.sqrt(self.hd) + mask
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                sc /= sc.sum(axis=1, keepdims=True)
                att[:, hq, :] = sc @ v[:, kh, :]
            x = x + att.reshape(n, -1) @ w("attn_output").T
            h = self.rmsnorm(x, w("ffn_norm"))
            g, u = h @ w("ffn_gate").T, h @ w("ffn_up").T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ w("ffn_down").T
        return self.rmsnorm(x, self.t["output_norm.weight"]) @ self.out.T


def spm_encode(meta, text):
    """SentencePiece BPE as GGUF 'llama' vocabularies use it: spaces -> U+2581, one
    prefix space, merge the adjacent pair whose merged piece has the highest score
    (leftmost on ties), byte fallback <0xNN> for characters without a piece."""
    pieces = [p.decode("utf-8", "replace") for p in meta["tokenizer.ggml.tokens"]]
    scores = meta["tokenizer.ggml.scores"]
    ids = {p: i for i, p in enumerate(pieces)}
    s = "\u2581" + text.replace(" ", "\u2581")
    syms = list(s)
    while True:
        best, at = None, -1
        for i in range(len(syms) - 1):
            m = syms[i] + syms[i + 1]
            if m in ids and (best is None or scores[ids[m]] > best):
                best, at = scores[ids[m]], i
        if at < 0:
            break
        syms[at:at + 2] = [syms[at] + syms[at + 1]]
    out = []
    for sym in syms:
        if sym in ids:
            out.append(ids[sym])
        else:
            out.extend(ids["<0x%02X>" % b] for b in sym.encode())
    return out


def spm_decode(meta, ids):
    pieces = meta["tokenizer.ggml.tokens"]
    out = b""
    for i in ids:
        p = pieces[i].decode("utf-8", "replace")
        if p.startswith("<0x") and p.endswith(">") and len(p) == 6:
            out += bytes([int(p[3:5], 16)])
        else:
            out += p.replace("\u2581", " ").encode()
    return out.decode("utf-8", "replace")


def write_value(out, vt, v):
    if vt == VT_STRING:
        out += struct.pack("<Q", len(v)) + v
    elif vt == VT_ARRAY:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for it in items:
            write_value(out, et, it)
    else:
        out += struct.pack(VT_FMT[vt], v)


def patch_gguf(src, dst, changes):
    """Copies GGUF src to dst with metadata keys set from changes {key: (type, value)}.
    Tensor infos and data are copied unchanged (same offsets, same alignment)."""
    buf = memoryview(open(src, "rb").read())
    r = Reader(buf)
    r.off = 4
    version = r.take("<I")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string().decode()
        vt = r.take("<I")
        if vt == VT_ARRAY:
            et, n = r.take("<I"), r.take("<Q")
            val = (et, [r.value(et) for _ in range(n)])
        else:
            val = r.value(vt)
        kvs.append([key, vt, val])
    infos_start = r.off
    meta = {k: v for k, _, v in kvs}
    for _ in range(n_tensors):
        r.string()
        nd = r.take("<I")
        r.off += 8 * nd + 4 + 8
    infos = bytes(buf[infos_start:r.off])
    align = meta.get("general.alignment", 32)
    data = (r.off + align - 1) // align * align
    for key, (vt, val) in changes.items():
        for kv in kvs:
            if kv[0] == key:
                kv[1], kv[2] = vt, val
                break
        else:
            kvs.append([key, vt, val])
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)))
    for key, vt, val in kvs:
        write_value(out, VT_STRING, key.encode())
        out += struct.pack("<I", vt)
        write_value(out, vt, val)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    out += bytes(buf[data:])
    open(dst, "wb").write(out)


def main(argv):
    if len(argv) >= 4 and argv[1] == "rope-scaling":
        # rope-scaling SRC DST llama3 FACTOR LOW HIGH ORIG | linear FACTOR
        kind, f = argv[4], float(argv[5])
        ch = {"llama.rope.scaling.type": (VT_STRING, kind.encode()),
              "llama.rope.scaling.factor": (6, f)}
        if kind == "llama3":
            ch["llama.rope.scaling.low_freq_factor"] = (6, float(argv[6]))
            ch["llama.rope.scaling.high_freq_factor"] = (6, float(argv[7]))
            ch["llama.rope.scaling.original_context_length"] = (4, int(argv[8]))
        patch_gguf(argv[2], argv[3], ch)
        return 0
    if len(argv) >= 5 and argv[1] == "logits":
        m = Llama(argv[2])
        toks = [int(x) for x in argv[4].split(",")]
        m.logits(toks).astype("<f4").tofile(argv[3])
        return 0
    if len(argv) >= 5 and argv[1] == "greedy":
        m = Llama(argv[2])
        prompt = [m.meta["tokenizer.ggml.bos_token_id"]] + spm_encode(m.meta, argv[3])
        toks = list(prompt)
        for _ in range(int(argv[4])):
            toks.append(int(np.argmax(m.logits(toks)[-1])))
        gen = toks[len(prompt):]
        print(",".join(map(str, prompt)))
        print(",".join(map(str, gen)))
        print(spm_decode(m.meta, gen))
        return 0
    sys.stderr.write(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
