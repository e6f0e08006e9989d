"""The scenarios layer: a deployment you describe (userconfig), every scheme on it (arena), and the analyses over it: what-if, the explorer, speculation, MoE advice, scaling, regimes, calibration."""
