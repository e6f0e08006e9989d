"""The papers layer: one module per paper, its experiments returning tidy frames and result rows scored against
data/reported/ (base.py says which names every paper has)."""
