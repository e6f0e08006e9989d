"""Gaussian outlier-aware dictionary quantization (GOBO, as STI Sec. 4.2 and Sec. 6 apply it per layer).

For one layer and one bitwidth k:
  1. gather all of the layer's shardable weights into one flat array and fit a one-component Gaussian
     (maximum likelihood: the mean and the population standard deviation, what sklearn's
     ``GaussianMixture(n_components=1)`` returns);
  2. a weight whose log-likelihood under that Gaussian is below the threshold (-4, from GOBO) is an
     *outlier* and is kept exactly (fp32 value + its offset);
  3. the other weights are sorted and cut into 2^k clusters of equal population; each cluster's
     arithmetic mean is its centroid, and every inlier is stored as the k-bit index of its centroid.
Outliers also get a k-bit index slot (0) for alignment, as the paper does. Decoding substitutes
centroids for indexes and writes the outliers back. 32 bits means "not quantized" (the fp32 weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError, require_int

FULL_BITS = 32
QUANT_BITS = (2, 3, 4, 5, 6)
LOG_LIKELIHOOD_THRESHOLD = -4.0  # STI Sec. 6, following GOBO (Zadeh et al. 2020)


def check_bits(bits: int) -> int:
    """Bitwidths STI stores: 1..8-bit dictionary indexes or 32 (fp32, unquantized)."""
    if not isinstance(bits, int | np.integer) or isinstance(bits, bool) or not (1 <= bits <= 8 or bits == FULL_BITS):
        raise WorkbenchError(f"bits must be an integer in 1..8 or {FULL_BITS} (fp32), got {bits!r}")
    return int(bits)


@dataclass(frozen=True)
class GaussianFit:
    """A one-component Gaussian fitted to a layer's weights (maximum likelihood)."""

    mean: float
    std: float

    def __post_init__(self) -> None:
        if not np.isfinite(self.mean) or not np.isfinite(self.std) or self.std <= 0:
            raise WorkbenchError(f"Gaussian fit needs a finite mean and std > 0, got mean={self.mean}, std={self.std}")

    def log_likelihood(self, x) -> np.ndarray:
        """Log density of each weight under N(mean, std^2)."""
        x = np.asarray(x, dtype=np.float64)
        return -0.5 * np.log(2 * np.pi * self.std**2) - (x - self.mean) ** 2 / (2 * self.std**2)


def fit_gaussian(weights) -> GaussianFit:
    """Maximum-likelihood Gaussian of a flat weight array (mean, population std)."""
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.size < 2:
        raise WorkbenchError(f"need at least 2 weights to fit a Gaussian, got {w.size}")
    return GaussianFit(float(w.mean()), float(w.std()))


def outlier_mask(weights, fit: GaussianFit, threshold: float = LOG_LIKELIHOOD_THRESHOLD) -> np.ndarray:
    """True where a weight's log-likelihood is below `threshold` (kept exactly, not quantized)."""
    return fit.log_likelihood(weights) < threshold


@dataclass(frozen=True)
class LayerQuantization:
    """One layer quantized at `bits`: per-weight codes over the flat layer array, centroids, outliers."""

    bits: int
    fit: GaussianFit
    centroids: np.ndarray  # (2^bits,) float32
    codes: np.ndarray  # (n,) uint8, flat over the layer's weights; 0 at outliers
    outliers: np.ndarray  # (n,) bool

    @property
    def outlier_fraction(self) -> float:
        """Share of the layer's weights kept exactly."""
        return float(self.outliers.mean())

    def decode(self, original_flat: np.ndarray) -> np.ndarray:
        """Dequantized flat layer: centroids at inliers, the exact `original_flat` values at outliers."""
        out = self.centroids[self.codes]
        out[self.outliers] = original_flat[self.outliers]
        return out


def quantize_layer(flat_weights, bits: int, threshold: float = LOG_LIKELIHOOD_THRESHOLD) -> LayerQuantization:
    """Quantize one layer's flat weights at `bits` (2^bits equal-population clusters + exact outliers)."""
    return quantize_layer_versions(flat_weights, (bits,), threshold)[bits]


def quantize_layer_versions(flat_weights, bits: tuple[int, ...],
                            threshold: float = LOG_LIKELIHOOD_THRESHOLD) -> dict[int, LayerQuantization]:
    """Quantize one layer at several bitwidths; the fit, outliers and sort are shared (they do not depend on k)."""
    bits = tuple(check_bits(b) for b in bits)
    if FULL_BITS in bits:
        raise WorkbenchError("32 bits is the unquantized fp32 version; quantize_layer takes 1..8 bits")
    w = np.asarray(flat_weights, dtype=np.float32).ravel()
    fit = fit_gaussian(w)
    outliers = outlier_mask(w, fit, threshold)
    inlier_idx = np.flatnonzero(~outliers)
    order = inlier_idx[np.argsort(w[inlier_idx])]  # inliers sorted by value (deterministic)
    sorted_values = w[order].astype(np.float64)
    out = {}
    for k in bits:
        n_clusters = 2**k
        if order.size < n_clusters:
            raise WorkbenchError(f"{order.size} inlier weights cannot fill {n_clusters} clusters at {k} bits")
        rank_cluster = (np.arange(order.size, dtype=np.int64) * n_clusters) // order.size  # equal population
        codes = np.zeros(w.size, dtype=np.uint8)
        codes[order] = rank_cluster.astype(np.uint8)
        sums = np.bincount(rank_cluster, weights=sorted_values, minlength=n_clusters)
        counts = np.bincount(rank_cluster, minlength=n_clusters)
        out[k] = LayerQuantization(k, fit, (sums / counts).astype(np.float32), codes, outliers)
    return out


# ---- bit packing (what goes to disk) ----------------------------------------------------------
def pack_codes(codes, bits: int) -> bytes:
    """Pack k-bit codes (uint8 < 2^k) into a big-endian bit stream of ceil(n * k / 8) bytes."""
    require_int("bits", bits, low=1, high=8)
    codes = np.asarray(codes, dtype=np.uint8).ravel()
    if codes.size and int(codes.max()) >= 2**bits:
        raise WorkbenchError(f"a code ({int(codes.max())}) does not fit in {bits} bits")
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint8)
    bit_matrix = (codes[:, None] >> shifts[None, :]) & 1  # (n, k)
    return np.packbits(bit_matrix.ravel()).tobytes()


def unpack_codes(blob: bytes, bits: int, count: int) -> np.ndarray:
    """Inverse of `pack_codes`: `count` k-bit codes as uint8."""
    require_int("bits", bits, low=1, high=8)
    require_int("count", count, low=0)
    needed = (count * bits + 7) // 8
    if len(blob) < needed:
        raise WorkbenchError(f"packed codes hold {len(blob)} bytes, {count} codes at {bits} bits need {needed}")
    bit_stream = np.unpackbits(np.frombuffer(blob, dtype=np.uint8, count=needed))[: count * bits]
    weights = (1 << np.arange(bits - 1, -1, -1)).astype(np.uint16)
    return (bit_stream.reshape(count, bits).astype(np.uint16) @ weights).astype(np.uint8)


def packed_code_bytes(count: int, bits: int) -> int:
    """Bytes of `count` packed k-bit codes."""
    return (count * bits + 7) // 8
