"""The measure layer: real processes on this machine: the multi-process cluster, engine runs and the machine profile."""
