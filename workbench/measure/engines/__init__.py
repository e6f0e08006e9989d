"""The engines people run, run here: random-weight model files in each engine's format, the engine started on them,
its own output parsed into measured rows (`workbench.measure.engines.llamacpp`, `workbench.measure.engines.campaign`). Imported only
by front ends and tests; the cost model never imports it (it reads the stored rows in data/engines/)."""
