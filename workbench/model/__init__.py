"""The model layer: the Transformer served (sizes, bytes, FLOPs), weight formats, MoE routing and model files."""
