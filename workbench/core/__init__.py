"""The core layer: errors, units, declared fields, atomic output, provenance constants, the timeline simulator and integer apportioning."""
