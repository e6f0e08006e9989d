"""One way to measure a machine: micro-benchmarks (`microbench`), one device-TOML builder (`device_toml`), the
storage read (`storage`), co-located processes' shares (`colocated`), the network table (`network`) and the
`python -m workbench profile` command (`cli`). Layers: profile uses `workbench.measure.cluster` (launcher, fit) for the
network table; nothing in `workbench.measure.cluster` imports profile."""
