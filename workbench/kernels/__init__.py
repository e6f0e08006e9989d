"""The kernels layer: JAX programs of the schemes (a monolithic reference and partitioned shard_map kernels), and
the roofline that holds them to one device."""
