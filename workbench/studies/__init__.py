"""The studies layer, the top: the workbench's own studies over scenarios and measurements.

Experiments about the workbench itself rather than a paper's results (the model registry, the collectives model,
the multi-process cluster runs and your own hardware). They return tidy frames and result rows like a paper module,
but they have no `data/reported/` numbers to be scored against, so they do not take the papers' shape
(`workbench.papers.base`)."""
