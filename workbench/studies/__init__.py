"""The workbench's own studies: experiments about the workbench itself rather than a paper's results (the model
registry, the collectives model, the multi-process cluster runs and your own hardware), beside `workbench.papers`
in the layer order. They return tidy frames and result rows like a paper module, but they have no
`data/reported/` numbers to be scored against, so they do not take the papers' shape (`workbench.papers.base`)."""
