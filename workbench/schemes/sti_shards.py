"""STI's elastic shards: vertical slices of a BERT layer, their quantized versions, and an on-disk store.

A shard (STI Table 1) is one attention head plus 1/M of the FFN neurons of one layer, M = number of
heads: the head's columns of Wq, Wk, Wv (E, D), its rows of Wo (D, E), and F/M neurons' columns of
W1 (E, F/M) and rows of W2 (F/M, E). Any subset of a layer's shards runs as a narrower layer.
Biases and LayerNorms are not sharded: STI keeps them in memory at full precision (Sec. 6).

A layer's shardable weights are flattened shard after shard (`flatten_layer`), so shard i is the
contiguous range [i*S, (i+1)*S) of the flat layer and one per-layer quantization (one Gaussian fit,
one dictionary) serves all of the layer's shards, as in the paper.

The store keeps every (layer, shard, bitwidth) as one record; records of one layer are co-located in
one file ``layer_LLL.bin`` (Sec. 6: "we co-locate disk blocks of shards from the same layer"), and
``index.json`` maps (layer, shard, bits) to (offset, length). A record at k <= 8 bits is
``centroids (2^k float32) | packed k-bit codes | outlier offsets (uint32) | outlier values (float32)``;
a 32-bit record is the raw float32 weights. Loading = read the byte ranges + decompress.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_int
from workbench.core.io import atomic_path, write_text_atomic
from workbench.model.models import TransformerConfig
from workbench.schemes.sti_quantize import (
    FULL_BITS,
    LOG_LIKELIHOOD_THRESHOLD,
    LayerQuantization,
    check_bits,
    pack_codes,
    packed_code_bytes,
    quantize_layer_versions,
    unpack_codes,
)

# matrix -> (axis sliced, what the slice follows): "head" = d_head columns/rows, "ffn" = F/M neurons
SHARD_MATRICES: dict[str, tuple[int, str]] = {
    "wq": (1, "head"), "wk": (1, "head"), "wv": (1, "head"), "wo": (0, "head"), "w1": (1, "ffn"), "w2": (0, "ffn"),
}
SHARD_BIASES: dict[str, str] = {"bq": "head", "bk": "head", "bv": "head", "b1": "ffn"}  # sliced, kept in memory
LAYER_RESIDENT = ("bo", "b2", "ln1_g", "ln1_b", "ln2_g", "ln2_b")  # whole-layer, kept in memory
OUTLIER_RECORD_BYTES = 8  # uint32 offset + float32 value per outlier
STORE_FORMAT = 1


def check_shardable(cfg: TransformerConfig) -> TransformerConfig:
    """STI shards BERT-family encoders (post-LN, GELU FFN, one KV head per head) whose FFN splits by heads."""
    if cfg.family != "bert":
        raise WorkbenchError(f"STI shards BERT-family encoders (Sec. 3.4); model {cfg.name!r} is {cfg.family!r}")
    if cfg.d_ff % cfg.n_heads:
        raise WorkbenchError(f"d_ff ({cfg.d_ff}) must be divisible by n_heads ({cfg.n_heads}) to split FFN neurons")
    return cfg


def n_shards(cfg: TransformerConfig) -> int:
    """Shards per layer M: one per attention head."""
    return cfg.n_heads


def shard_weight_count(cfg: TransformerConfig) -> int:
    """Weights of one shard: 4 E D (Q, K, V, O of one head) + 2 E F/M (its FFN neurons)."""
    check_shardable(cfg)
    return 4 * cfg.d_model * cfg.d_head + 2 * cfg.d_model * (cfg.d_ff // cfg.n_heads)


def _slice(cfg: TransformerConfig, follows: str, index: int) -> slice:
    width = cfg.d_head if follows == "head" else cfg.d_ff // cfg.n_heads
    return slice(index * width, (index + 1) * width)


def _check_index(cfg: TransformerConfig, index: int) -> int:
    return require_int("shard index", int(index), low=0, high=n_shards(cfg) - 1)


def extract_shard(cfg: TransformerConfig, block: dict, index: int) -> dict[str, np.ndarray]:
    """The weight matrices of shard `index` of one layer (numpy views/copies of `block`)."""
    check_shardable(cfg)
    _check_index(cfg, index)
    out = {}
    for name, (axis, follows) in SHARD_MATRICES.items():
        w = np.asarray(block[name])
        out[name] = w[:, _slice(cfg, follows, index)] if axis == 1 else w[_slice(cfg, follows, index), :]
    return out


def shard_shapes(cfg: TransformerConfig) -> dict[str, tuple[int, int]]:
    """Shape of each matrix of one shard."""
    e, d, f = cfg.d_model, cfg.d_head, cfg.d_ff // cfg.n_heads
    return {"wq": (e, d), "wk": (e, d), "wv": (e, d), "wo": (d, e), "w1": (e, f), "w2": (f, e)}


def flatten_shard(cfg: TransformerConfig, shard: dict[str, np.ndarray]) -> np.ndarray:
    """One shard's matrices as one flat float32 array (order of SHARD_MATRICES, row-major)."""
    return np.concatenate([np.asarray(shard[name], dtype=np.float32).ravel() for name in SHARD_MATRICES])


def unflatten_shard(cfg: TransformerConfig, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Inverse of `flatten_shard`."""
    shapes = shard_shapes(cfg)
    if flat.size != shard_weight_count(cfg):
        raise WorkbenchError(f"a shard of {cfg.name!r} has {shard_weight_count(cfg)} weights, got {flat.size}")
    out, start = {}, 0
    for name in SHARD_MATRICES:
        size = shapes[name][0] * shapes[name][1]
        out[name] = flat[start:start + size].reshape(shapes[name])
        start += size
    return out


def flatten_layer(cfg: TransformerConfig, block: dict) -> np.ndarray:
    """A layer's shardable weights, shard after shard: shard i is the range [i*S, (i+1)*S)."""
    return np.concatenate([flatten_shard(cfg, extract_shard(cfg, block, i)) for i in range(n_shards(cfg))])


def assemble_block(cfg: TransformerConfig, block: dict, shards: dict[int, dict[str, np.ndarray]],
                   pad_to: int | None = None) -> dict:
    """Block params of a narrower layer made of `shards` {index: matrices}, in index order.

    Sharded matrices are concatenated along their sliced axis; sliced biases (bq, bk, bv, b1) come
    from the resident full-precision `block`; bo, b2 and the LayerNorms are whole-layer. `pad_to`
    appends all-zero shards up to that many: a zero head adds nothing (its Wo rows are 0) and zero
    neurons neither (their W2 rows are 0), so the output is the narrow layer's with fixed shapes
    (one compilation for every width; used for fast quality evaluation, not for timing).
    """
    if not shards:
        raise WorkbenchError("a layer needs at least one shard")
    order = sorted(shards)
    for i in order:
        _check_index(cfg, i)
    n_pad = 0 if pad_to is None else require_int("pad_to", pad_to, low=len(order), high=n_shards(cfg)) - len(order)
    zero = {name: np.zeros(shape, np.float32) for name, shape in shard_shapes(cfg).items()}
    out = {}
    for name, (axis, _) in SHARD_MATRICES.items():
        parts = [np.asarray(shards[i][name], dtype=np.float32) for i in order] + [zero[name]] * n_pad
        out[name] = np.concatenate(parts, axis=axis)
    for name, follows in SHARD_BIASES.items():
        b = np.asarray(block[name], dtype=np.float32)
        width = cfg.d_head if follows == "head" else cfg.d_ff // cfg.n_heads
        out[name] = np.concatenate([b[_slice(cfg, follows, i)] for i in order] + [np.zeros(width * n_pad, np.float32)])
    for name in LAYER_RESIDENT:
        out[name] = np.asarray(block[name], dtype=np.float32)
    return out


# ---- sizes ------------------------------------------------------------------------------------
def shard_record_bytes(n_weights: int, bits: int, n_outliers: float = 0) -> float:
    """On-disk bytes of one shard record: dictionary + packed indexes + outliers, or raw fp32 at 32 bits."""
    bits = check_bits(bits)
    if bits == FULL_BITS:
        return 4.0 * n_weights
    return 4.0 * 2**bits + packed_code_bytes(n_weights, bits) + OUTLIER_RECORD_BYTES * n_outliers


def store_bytes(cfg: TransformerConfig, bits: Iterable[int], outlier_fraction: float, n_layers: int | None = None) -> float:
    """Modelled bytes of every shard of `n_layers` layers at each of `bits` (outliers at `outlier_fraction`)."""
    if not 0 <= outlier_fraction < 1:
        raise WorkbenchError(f"outlier_fraction must be in [0, 1), got {outlier_fraction!r}")
    n_layers = cfg.n_layers if n_layers is None else require_int("n_layers", n_layers, low=1)
    s = shard_weight_count(cfg)
    per_layer = sum(n_shards(cfg) * shard_record_bytes(s, b, outlier_fraction * s if b != FULL_BITS else 0) for b in bits)
    return n_layers * per_layer


# ---- in-memory quantized versions -------------------------------------------------------------
@dataclass
class ShardedModel:
    """A BERT model's shards at every bitwidth, quantized in memory (per-layer dictionaries).

    `params` are reference-layout params (workbench.kernels.reference); `layers[l][bits]` is the
    layer's `LayerQuantization`. Dequantized flat layers are cached per (layer, bits).
    """

    cfg: TransformerConfig
    params: dict
    bits: tuple[int, ...]
    flat: list[np.ndarray]
    layers: list[dict[int, LayerQuantization]]
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_layers(self) -> int:
        """Layers N."""
        return self.cfg.n_layers

    @property
    def n_shards(self) -> int:
        """Shards per layer M."""
        return n_shards(self.cfg)

    def flat_layer(self, layer: int, bits: int) -> np.ndarray:
        """The layer's flat weights as the version at `bits` decodes them (fp32 at 32 bits)."""
        require_int("layer", layer, low=0, high=self.n_layers - 1)
        bits = check_bits(bits)
        if bits == FULL_BITS:
            return self.flat[layer]
        if bits not in self.layers[layer]:
            raise WorkbenchError(f"bitwidth {bits} was not quantized; available: {sorted(self.layers[layer])} and 32")
        key = (layer, bits)
        if key not in self._cache:
            self._cache[key] = self.layers[layer][bits].decode(self.flat[layer])
        return self._cache[key]

    def shard_weights(self, layer: int, shard: int, bits: int) -> dict[str, np.ndarray]:
        """Matrices of shard (`layer`, `shard`) at `bits`."""
        _check_index(self.cfg, shard)
        s = shard_weight_count(self.cfg)
        return unflatten_shard(self.cfg, self.flat_layer(layer, bits)[shard * s:(shard + 1) * s])

    def outlier_fraction(self, bits: int | None = None) -> float:
        """Share of shard weights kept exactly (identical for every bitwidth: the fit does not depend on k)."""
        bits = bits or min(b for b in self.bits if b != FULL_BITS)
        total = sum(q[bits].outliers.sum() for q in self.layers)
        return float(total / sum(f.size for f in self.flat))


def shard_model(cfg: TransformerConfig, params: dict, bits: Sequence[int] = (2, 3, 4, 5, 6, 32),
                threshold: float = LOG_LIKELIHOOD_THRESHOLD) -> ShardedModel:
    """Quantize every layer of `params` at each of `bits` (32 = keep fp32)."""
    check_shardable(cfg)
    bits = tuple(sorted({check_bits(b) for b in bits}))
    flat = [flatten_layer(cfg, block) for block in params["blocks"]]
    layers = [quantize_layer_versions(f, tuple(b for b in bits if b != FULL_BITS), threshold) for f in flat]
    return ShardedModel(cfg, params, bits, flat, layers)


# ---- on-disk store ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadStats:
    """What one layer load cost: bytes read, seconds reading, seconds decompressing."""

    bytes_read: int
    read_s: float
    decompress_s: float

    @property
    def total_s(self) -> float:
        """Load = read + decompress."""
        return self.read_s + self.decompress_s


def _encode_record(q: LayerQuantization | None, flat_layer: np.ndarray, start: int, count: int) -> tuple[bytes, int]:
    """Bytes of one shard record and its number of outliers."""
    if q is None:
        return np.ascontiguousarray(flat_layer[start:start + count], dtype="<f4").tobytes(), 0
    out_idx = np.flatnonzero(q.outliers[start:start + count]).astype("<u4")
    values = flat_layer[start:start + count][out_idx].astype("<f4")
    blob = q.centroids.astype("<f4").tobytes() + pack_codes(q.codes[start:start + count], q.bits)
    return blob + out_idx.tobytes() + values.tobytes(), int(out_idx.size)


def _decode_record(blob: bytes, bits: int, count: int, n_outliers: int) -> np.ndarray:
    """Decompress one record into the shard's flat float32 weights."""
    if bits == FULL_BITS:
        return np.frombuffer(blob, dtype="<f4", count=count).astype(np.float32)
    n_centroids = 2**bits
    centroids = np.frombuffer(blob, dtype="<f4", count=n_centroids)
    code_start = 4 * n_centroids
    code_bytes = packed_code_bytes(count, bits)
    codes = unpack_codes(blob[code_start:code_start + code_bytes], bits, count)
    flat = centroids[codes].astype(np.float32)
    off = code_start + code_bytes
    idx = np.frombuffer(blob, dtype="<u4", count=n_outliers, offset=off)
    flat[idx] = np.frombuffer(blob, dtype="<f4", count=n_outliers, offset=off + 4 * n_outliers)
    return flat


class ShardStore:
    """Shards of every bitwidth on disk, co-located per layer; load = read + decompress."""

    def __init__(self, directory: str | os.PathLike, cfg: TransformerConfig):
        self.directory = Path(directory)
        index_path = self.directory / "index.json"
        if not index_path.exists():
            raise WorkbenchError(f"no shard store at {self.directory} (index.json missing); write one with ShardStore.write")
        self.index = json.loads(index_path.read_text())
        if self.index.get("format") != STORE_FORMAT:
            raise WorkbenchError(f"shard store format {self.index.get('format')!r} is not {STORE_FORMAT}")
        self.cfg = check_shardable(cfg)
        if self.index["shard_weights"] != shard_weight_count(cfg):
            raise WorkbenchError(f"store holds shards of {self.index['shard_weights']} weights, "
                                 f"{cfg.name!r} needs {shard_weight_count(cfg)}")
        self.records = {(r["layer"], r["shard"], r["bits"]): r for r in self.index["records"]}
        self.bits = tuple(self.index["bits"])

    @classmethod
    def write(cls, directory: str | os.PathLike, model: ShardedModel) -> ShardStore:
        """Write every shard of `model` at every bitwidth; each layer file is written atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        s = shard_weight_count(model.cfg)
        records = []
        for layer in range(model.n_layers):
            path = directory / f"layer_{layer:03d}.bin"
            offset = 0
            with atomic_path(path) as tmp, open(tmp, "wb") as f:
                for bits in model.bits:
                    q = None if bits == FULL_BITS else model.layers[layer][bits]
                    for shard in range(model.n_shards):
                        blob, n_out = _encode_record(q, model.flat[layer], shard * s, s)
                        f.write(blob)
                        records.append({"layer": layer, "shard": shard, "bits": bits, "file": path.name,
                                        "offset": offset, "length": len(blob), "n_outliers": n_out})
                        offset += len(blob)
        index = {"format": STORE_FORMAT, "model": model.cfg.name, "n_layers": model.n_layers,
                 "n_shards": model.n_shards, "shard_weights": s, "bits": list(model.bits), "records": records}
        write_text_atomic(directory / "index.json", json.dumps(index))
        return cls(directory, model.cfg)

    def _record(self, layer: int, shard: int, bits: int) -> dict:
        try:
            return self.records[(layer, shard, bits)]
        except KeyError:
            raise WorkbenchError(f"store has no shard (layer={layer}, shard={shard}, bits={bits}); "
                                 f"layers 0..{self.index['n_layers'] - 1}, shards 0..{self.index['n_shards'] - 1}, "
                                 f"bits {self.bits}") from None

    def load_layer(self, layer: int, selection: Sequence[tuple[int, int]]) -> tuple[dict[int, dict], LoadStats]:
        """Load shards [(shard, bits), ...] of one layer as one IO job: read the records, then decompress."""
        records = [self._record(layer, shard, bits) for shard, bits in selection]
        if len({r["shard"] for r in records}) != len(records):
            raise WorkbenchError(f"layer {layer}: a shard is selected twice in {list(selection)}")
        t0 = time.perf_counter()
        blobs = []
        if records:
            with open(self.directory / records[0]["file"], "rb") as f:
                for r in sorted(records, key=lambda r: r["offset"]):
                    f.seek(r["offset"])
                    blobs.append((r, f.read(r["length"])))
        t1 = time.perf_counter()
        s = self.index["shard_weights"]
        shards = {r["shard"]: unflatten_shard(self.cfg, _decode_record(blob, r["bits"], s, r["n_outliers"]))
                  for r, blob in blobs}
        t2 = time.perf_counter()
        return shards, LoadStats(sum(len(b) for _, b in blobs), t1 - t0, t2 - t1)

    def shard_weights(self, layer: int, shard: int, bits: int) -> dict[str, np.ndarray]:
        """Matrices of one shard, read and decompressed from disk."""
        return self.load_layer(layer, [(shard, bits)])[0][shard]

    def record_sizes(self) -> pd.DataFrame:
        """One row per record: layer, shard, bits, bytes, outliers."""
        return pd.DataFrame([{k: r[k] for k in ("layer", "shard", "bits", "length", "n_outliers")}
                             for r in self.index["records"]]).rename(columns={"length": "bytes"})

    def file_sizes(self) -> pd.DataFrame:
        """Measured size on disk of each layer file."""
        files = sorted({r["file"] for r in self.index["records"]})
        return pd.DataFrame({"file": files, "bytes": [os.path.getsize(self.directory / f) for f in files]})

    def bytes_by_bits(self) -> pd.Series:
        """Bytes of all shards at each bitwidth (sum of the records on disk)."""
        return self.record_sizes().groupby("bits")["bytes"].sum()
