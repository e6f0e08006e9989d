"""The machine layer: devices (peaks, memory, power), links and collectives, and an engine's matmul kernels on a device."""
