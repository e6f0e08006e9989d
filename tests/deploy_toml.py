"""Shared test data: a two-board deployment TOML that sets the device keys a test is about."""

from __future__ import annotations


def board_deployment(device_keys: str = "", model_keys: str = "", bandwidth_gb_per_s: int = 40) -> str:
    """TinyLlama-42M on 2 boards (100 GFLOP/s fp32, 8 GiB DRAM) over a 1 Gbit switch, with `device_keys` (TOML
    lines) in the [[devices]] table and `model_keys` in [model]."""
    model = f"{model_keys}\n" if model_keys else ""
    device = f"{device_keys}\n" if device_keys else ""
    if "memory_efficiency" not in device_keys and "device_class" not in device_keys:
        device += "memory_efficiency = 1.0\n"  # stated (a file that states none takes its class's typical value)
    return (f'\n[model]\nname = "TinyLlama-42M"\n{model}[network]\ntopology = "switch"\nbandwidth_mbps = 1000\n'
            f'[[devices]]\nname = "board"\ncount = 2\npeak_gflops = {{ fp32 = 100 }}\n{device}'
            f'[[devices.memory]]\nname = "DRAM"\ncapacity_gib = 8\nbandwidth_gb_per_s = {bandwidth_gb_per_s}\n')
